"""Prompt files as editors and scripts write them: lines end at \\n only (JSON strings may hold U+2028 and other
characters str.splitlines() breaks at), a byte-order mark, \\r\\n; blank prompts are refused with their line; ids
that clash or run long as file names still get one trace file each."""

import json

import pytest
from support.cli import run_goose

from drafting.bench.prompt_file import PromptFileError, read_prompts
from drafting.bench.traces import trace_path

SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x1d", "\x0b", "\x0c"]  # all split by str.splitlines()


def write(tmp_path, text: str, encoding: str = "utf-8"):
    p = tmp_path / "p.jsonl"
    p.write_bytes(text.encode(encoding))
    return p


@pytest.mark.parametrize("sep", SEPARATORS[:3])
def test_line_separators_inside_a_prompt_stay_in_it(tmp_path, sep):
    """json.dumps(ensure_ascii=False) writes these characters raw; they are legal inside a JSON string."""
    prompt = f"first{sep}second"
    lines = [json.dumps({"id": "a", "prompt": prompt}, ensure_ascii=False),
             json.dumps({"id": "b", "prompt": "x", "turns": ["x", f"y{sep}z"]}, ensure_ascii=False)]
    got = read_prompts(write(tmp_path, "\n".join(lines) + "\n"))
    assert [p.id for p in got] == ["a", "b"]
    assert got[0].text == prompt and got[1].turns == ("x", f"y{sep}z")
    assert [p.line for p in got] == [1, 2]


def test_escaped_control_separators_read_back(tmp_path):
    """The separators JSON cannot hold raw (control characters) arrive escaped and read back as they were."""
    prompt = "a" + "b".join(SEPARATORS) + "c"
    assert read_prompts(write(tmp_path, json.dumps({"prompt": prompt}) + "\n"))[0].text == prompt


def test_byte_order_mark_is_not_part_of_the_first_line(tmp_path):
    got = read_prompts(write(tmp_path, '{"id": "a", "prompt": "hi"}\n{"id": "b", "prompt": "yo"}\n', "utf-8-sig"))
    assert [(p.id, p.text, p.line) for p in got] == [("a", "hi", 1), ("b", "yo", 2)]


def test_crlf_lines_keep_working(tmp_path):
    got = read_prompts(write(tmp_path, '{"id": "a", "prompt": "hi"}\r\n\r\n{"id": "b", "prompt": "yo"}\r\n'))
    assert [(p.id, p.text, p.line) for p in got] == [("a", "hi", 1), ("b", "yo", 3)]


@pytest.mark.parametrize("line, message", [
    ({"prompt": "   "}, ':2: the "prompt" is only whitespace.'),
    ({"prompt": "\n\t\u2028"}, ':2: the "prompt" is only whitespace.'),
    ({"prompt": "hi", "turns": ["hi", " \n "]}, ':2: turn 2 of "turns" is only whitespace.'),
])
def test_blank_prompts_and_turns_are_refused_with_their_line(tmp_path, line, message):
    path = write(tmp_path, '{"prompt": "ok"}\n' + json.dumps(line, ensure_ascii=False) + "\n")
    with pytest.raises(PromptFileError) as err:
        read_prompts(path)
    assert str(err.value) == f"{path}{message}"


LONG = "q" * 300
CLASHING = ["a/b", "a_b", "a:b", "_a_b_", LONG, LONG + "2"]


def test_trace_names_of_plain_ids_do_not_change(tmp_path):
    """Ids that clash with no other id keep the names they always had."""
    from drafting.bench.traces import trace_stems

    ids = ["humaneval/75", "p1", "mt_bench/81"]
    assert [trace_path(tmp_path, i, "pld:draft=8", trace_stems(ids)[i]).name for i in ids] == [
        "humaneval_75__pld_draft=8.jsonl", "p1__pld_draft=8.jsonl", "mt_bench_81__pld_draft=8.jsonl"]
    assert trace_path(tmp_path, "humaneval/75", "pld").name == "humaneval_75__pld.jsonl"


def test_clashing_and_long_ids_get_distinct_valid_names(tmp_path):
    from drafting.bench.traces import trace_stems

    stems = trace_stems(CLASHING)
    paths = [trace_path(tmp_path, i, "goose:" + "budget=60," * 20, stems[i]) for i in CLASHING]
    assert len(set(paths)) == len(CLASHING)
    assert stems["a_b"] == "a_b"  # the id that is its own safe name keeps it
    for p in paths:
        assert len(p.name.encode()) <= 255
        p.write_text("{}")  # the file system takes the name
    assert len(list(tmp_path.iterdir())) == len(CLASHING)


@pytest.mark.slow
def test_bench_writes_one_trace_per_prompt_for_clashing_ids(tmp_path):
    from drafting.engine.trace import read_trace

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "prompt": f"Say {n}."}) + "\n" for n, i in enumerate(CLASHING)))
    traces = tmp_path / "traces"
    proc = run_goose("bench", str(prompts), "-s", "ar", "-n", "2", "--weights", "float", "--trace", str(traces))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    files = list(traces.iterdir())
    assert len(files) == len(CLASHING)
    assert sorted(read_trace(f).header["prompt_id"] for f in files) == sorted(CLASHING)
