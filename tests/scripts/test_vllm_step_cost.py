"""scripts/vllm_step_cost.py without an engine: the fixed-draft proposer's contract and the argument errors."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from scripts.vllm_step_cost import DRAFTS_FILE_ENV, FixedDrafts, main


def test_fixed_drafts_repeat_the_last_token_within_the_length_limit(tmp_path, monkeypatch):
    drafts = tmp_path / "drafts"
    drafts.write_text("4")
    monkeypatch.setenv(DRAFTS_FILE_ENV, str(drafts))
    proposer = FixedDrafts(SimpleNamespace(model_config=SimpleNamespace(max_model_len=12)))
    tokens = np.zeros((3, 12), dtype=np.int32)
    tokens[0, :5] = [1, 2, 3, 4, 9]
    tokens[1, :9] = 7
    tokens[2, :3] = [5, 6, 8]
    out = proposer.propose([[9], [7], []], np.array([5, 9, 3]), tokens)
    # a full draft, one cut to leave room for the bonus token at the limit, none for a row still in prefill
    assert out == [[9, 9, 9, 9], [7, 7], []]
    drafts.write_text("0")
    assert proposer.propose([[9]], np.array([5]), tokens) == [[]]


@pytest.mark.parametrize("args", [["--batch", "1,x"], ["--batch", "0"], ["--drafts", "-1"], ["--steps", "3"]])
def test_bad_arguments_give_one_sentence_and_exit_2(args, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and err.count("\n") == 0
