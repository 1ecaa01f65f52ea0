"""Prompt files: good lines parse, every bad one is reported as FILE:LINE in one sentence."""

import json

import pytest

from drafting.bench.prompt_file import PromptFileError, read_prompts


def write(tmp_path, *lines) -> str:
    p = tmp_path / "p.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def test_reads_ids_tasks_and_turns(tmp_path):
    path = write(
        tmp_path,
        json.dumps({"id": "a", "task": "t1", "prompt": "hello"}),
        "",
        json.dumps({"prompt": "first", "turns": ["first", "second"], "task": "t2"}),
        json.dumps({"id": 7, "prompt": "x"}),
    )
    ps = read_prompts(path)
    assert [p.id for p in ps] == ["a", "line3", "7"]
    assert [p.task for p in ps] == ["t1", "t2", "default"]
    assert ps[1].turns == ("first", "second")
    assert ps[0].turns == ("hello",)
    assert [p.id for p in read_prompts(path, tasks={"t2"})] == ["line3"]
    assert len(read_prompts(path, limit=2)) == 2


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"prompt": "ok"}', '{"prompt": "broken'], ":2: not valid JSON"),
        (['{"prompt": "ok"}', '{"id": "x"}'], ':2: the line has no non-empty string "prompt"'),
        (['{"prompt": 3}'], ':1: the line has no non-empty string "prompt"'),
        (['["prompt"]'], ":1: each line must be a JSON object"),
        (['{"prompt": "a", "turns": "b"}'], ':1: "turns" must be a non-empty list of strings'),
        (['{"id": "a", "prompt": "x"}', '{"id": "a", "prompt": "y"}'], ":2: prompt id 'a' was already used on line 1"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path, lines, message):
    path = write(tmp_path, *lines)
    with pytest.raises(PromptFileError) as err:
        read_prompts(path)
    assert str(err.value).startswith(path)
    assert message in str(err.value)


def test_missing_empty_and_unknown_task(tmp_path):
    with pytest.raises(PromptFileError, match="does not exist"):
        read_prompts(tmp_path / "nope.jsonl")
    with pytest.raises(PromptFileError, match="is empty"):
        read_prompts(write(tmp_path, "", "  "))
    with pytest.raises(PromptFileError, match="No prompts of task 'zzz'"):
        read_prompts(write(tmp_path, '{"prompt": "a", "task": "t"}'), tasks={"zzz"})
