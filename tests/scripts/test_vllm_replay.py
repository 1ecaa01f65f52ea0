"""scripts/vllm_replay.py: GooseProposer stepped over recorded outputs the way vLLM's step loop drives it (no vLLM
needed for goose); the counts add up, the oracle keeps only accepted tokens, rows move as vLLM moves them."""

from __future__ import annotations

import json

import pytest

from scripts.vllm_replay import ReplayError, StepModel, accepted_length, main, recorded_turns, replay
from tests.integrations.test_vllm_proposer import repetitive


def run_file(tmp_path, prompts: int = 5):
    rows = []
    for i in range(prompts):
        text = repetitive(i, 200)
        turns = [[text[:60], text[60:120]], [text[:130], text[130:200]]] if i % 2 else [[text[:80], text[80:200]]]
        rows.append({"method": "none", "concurrency": 1, "id": f"p{i}", "turn_ids": turns})
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"num_speculative_tokens": 8, "runs": rows}))
    return path


def test_replay_counts_add_up_and_goose_drafts(tmp_path):
    convs = recorded_turns(json.loads(run_file(tmp_path).read_text()))
    total = sum(len(o) for conv in convs for _, o in conv)
    turns = sum(len(conv) for conv in convs)
    plain = replay("none", convs, 1, 8, StepModel())
    assert plain["new_tokens"] == total == plain["steps"] and plain["draft_tokens"] == 0
    for c in (1, 3):
        r = replay("goose", convs, c, 8, StepModel())
        assert r["new_tokens"] == total
        assert 0 < r["accepted"] <= r["draft_tokens"]
        if c == 1:  # one request at a time: every step emits its accepted drafts and one token, but a turn's
            # last step has no token after drafts that reach its end
            assert total - r["accepted"] <= r["steps"] <= total - r["accepted"] + turns
        else:
            assert r["steps"] < replay("none", convs, c, 8, StepModel())["steps"] or r["accepted"] == 0
        oracle = replay("oracle:goose:budget=off", convs, c, 8, StepModel())
        assert oracle["accepted"] == oracle["draft_tokens"] >= r["accepted"] * 0.5
        assert oracle["drafting_steps"] <= replay("goose:budget=off", convs, c, 8, StepModel())["drafting_steps"]


@pytest.mark.parametrize("method, module", [("ngram:2-5", "vllm.v1.spec_decode.ngram_proposer"),
                                            ("suffix", "arctic_inference")])
def test_vllms_own_proposers_replay_with_the_same_accounting(tmp_path, method, module):
    pytest.importorskip(module)  # .venv-vllm
    convs = recorded_turns(json.loads(run_file(tmp_path).read_text()))
    total = sum(len(o) for conv in convs for _, o in conv)
    turns = sum(len(conv) for conv in convs)
    r = replay(method, convs, 1, 8, StepModel())
    assert r["new_tokens"] == total and 0 < r["accepted"] <= r["draft_tokens"]
    assert total - r["accepted"] <= r["steps"] <= total - r["accepted"] + turns
    oracle = replay(f"oracle:{method}", convs, 1, 8, StepModel())
    assert oracle["accepted"] == oracle["draft_tokens"] == r["accepted"]  # the same drafts, the rejected cut off
    best = replay(f"best:{method}|goose", convs, 1, 8, StepModel())
    assert 0 < best["accepted"] == best["draft_tokens"]


def test_step_model_reads_the_probe_rows_and_interpolates():
    rows = [{"speculation": False, "batch": 1, "drafts": 0, "verified": 1, "median_ms": 50.0},
            {"speculation": True, "batch": 1, "drafts": 0, "verified": 1, "median_ms": 50.0},
            {"speculation": True, "batch": 1, "drafts": 8, "verified": 9, "median_ms": 66.0},
            {"speculation": True, "batch": 4, "drafts": 0, "verified": 4, "median_ms": 60.0},
            {"speculation": True, "batch": 4, "drafts": 8, "verified": 36, "median_ms": 160.0}]
    m = StepModel(rows)
    assert m.ms(False, 1, 1) == 50.0
    assert m.ms(True, 1, 5) == pytest.approx(58.0)
    assert m.ms(True, 2, 2) == pytest.approx(50.0 + (60.0 - 50.0) / 3)
    assert StepModel().ms(True, 7, 30) == 1.0


def test_bad_input_is_one_sentence(tmp_path, capsys):
    assert accepted_length([1, 2, 3], [1, 2, 9]) == 2 and accepted_length([1, 2], [1]) == 1
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"runs": []}))
    with pytest.raises(ReplayError, match="none"):
        recorded_turns(json.loads(empty.read_text()))
    assert main([str(empty)]) == 2
    assert main([str(run_file(tmp_path)), "--methods", "goose:spine=tree"]) == 2
    assert main([str(run_file(tmp_path)), "--concurrency", "0"]) == 2
    err = capsys.readouterr().err
    assert all(line.startswith("error: ") for line in err.splitlines()) and len(err.splitlines()) == 3
