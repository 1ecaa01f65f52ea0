"""custom_generate checks transformers' stopping criteria with one host read a step, not one a token, and still
stops at the very token a criterion names (on a tiny random Llama inside its own generate())."""

from __future__ import annotations

import inspect

import pytest
import torch

import drafting
from drafting.integrations import custom_generate as module
from support.host_reads import counting_host_reads

PROMPT = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12] * 4])


class CountingDecoder(module.Decoder):
    """The Decoder custom_generate builds, keeping its runs so the test can count their steps."""

    runs: list = []

    def run(self, *args, **kwargs):
        run = super().run(*args, **kwargs)
        CountingDecoder.runs.append(run)
        return run


@pytest.fixture
def counted(monkeypatch):
    CountingDecoder.runs = []
    monkeypatch.setattr(module, "Decoder", CountingDecoder)
    return CountingDecoder.runs


def _generate(model, **kwargs):
    return model.generate(PROMPT, custom_generate=drafting.custom_generate, speculator="goose:budget=8",
                          do_sample=False, pad_token_id=0, **kwargs)


def test_the_stopping_check_reads_the_host_once_a_step(tiny_lm, counted):
    with counting_host_reads() as counts:
        out = _generate(tiny_lm.model, max_new_tokens=24)
    result = counted[0].result
    assert out.shape[1] == PROMPT.shape[1] + len(result.output_ids)
    assert len(result.output_ids) > result.steps  # steps of several tokens: a read a token would show
    lines, first = inspect.getsourcelines(module._append)  # where a step's tokens are written and checked
    in_steps = sum(n for (_, where), n in counts.items()
                   if where.startswith("drafting/integrations/custom_generate.py:")
                   and first <= int(where.rsplit(":", 1)[1]) < first + len(lines))
    assert in_steps == result.steps, dict(counts)


def test_a_stop_inside_a_step_keeps_the_tokens_up_to_it(tiny_lm, counted):
    full = _generate(tiny_lm.model, max_new_tokens=24)
    new = full[0, PROMPT.shape[1]:].tolist()
    steps = counted[0].result.records
    # stop on a token inside a multi-token step, at its first occurrence
    stop_at = next(r.position + j for r in steps for j in range(len(r.emitted) - 1)
                   if new[r.position + j] not in new[: r.position + j])
    token = new[stop_at]
    got = _generate(tiny_lm.model, max_new_tokens=24, eos_token_id=token)
    assert got[0, PROMPT.shape[1]:].tolist() == new[: stop_at + 1]
