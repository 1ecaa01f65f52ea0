"""Trace files: what is written reads back the same; broken files give one clear sentence."""

import json

import pytest

from drafting.engine.trace import TRACE_VERSION, StepRecord, TraceError, TraceWriter, read_trace
from support.tracefixtures import WordTokenizer, goose_records, ptd_records, write_fixture_traces


def test_round_trip_keeps_every_field_and_token_text(tmp_path):
    goose, ptd = write_fixture_traces(tmp_path)
    for path, records in ((goose, goose_records()), (ptd, ptd_records())):
        trace = read_trace(path)
        assert trace.records == records
        assert trace.header["prompt_id"] == "p1"
        assert trace.text(records[0].tokens[0]) == "def"
        assert trace.text(999_999) == "<999999>"
    first = read_trace(ptd).records[0]
    assert first.rows["grown"][1] == [-1, 104]  # a new slot "," as [parent row, token]
    assert read_trace(ptd).text(104) == ","


def test_sections_hold_one_generation_each(tmp_path):
    path = tmp_path / "chat.jsonl"
    with TraceWriter(path, {"command": "chat"}, tokenizer=WordTokenizer()) as w:
        for turn, records in enumerate((goose_records(), ptd_records()), start=1):
            w.section({"turn": turn})
            for r in records:
                w.write(r)
    trace = read_trace(path)
    assert [s["header"]["turn"] for s in trace.sections] == [1, 2]
    assert [len(s["records"]) for s in trace.sections] == [len(goose_records()), len(ptd_records())]


def test_a_run_cut_off_mid_line_keeps_its_complete_steps(tmp_path):
    goose, _ = write_fixture_traces(tmp_path)
    text = goose.read_text()
    goose.write_text(text[: len(text) - 40])
    assert len(read_trace(goose).records) == len(goose_records()) - 1


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "does not exist"),
        ("", "is empty"),
        ("hello\n", "not a goose trace"),
        ('{"something": 1}\n', "no goose_trace header"),
        (json.dumps({"goose_trace": TRACE_VERSION + 1}) + "\n{}\n", "format version"),
        (json.dumps({"goose_trace": TRACE_VERSION}) + "\n", "holds no steps"),
        (json.dumps({"goose_trace": TRACE_VERSION}) + "\n{broken\n" + json.dumps(StepRecord(0, 0, [1], [-1], ["root"], [0], [2], 0, 0).to_dict()) + "\n", "damaged at line 2"),
    ],
)
def test_bad_traces_raise_one_sentence(tmp_path, content, words):
    path = tmp_path / "t.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(TraceError) as err:
        read_trace(path)
    assert words in str(err.value)
    assert "\n" not in str(err.value) and str(err.value).endswith(".")
