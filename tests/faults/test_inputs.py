"""Sampling settings that cannot be sampled with are refused in one sentence before any model work: NaN, inf or
a temperature so small that logits / temperature overflows, a seed a random generator cannot take, a NaN top-p.

The CLI runs name a model that does not exist: the sampling sentence must be the one reported, so it came first.
"""

import math

import pytest
import torch
from support.cli import run_goose

import drafting
from drafting.engine.sampling import warp
from drafting.engine.sampling_params import SamplingParams

NAN, INF = float("nan"), float("inf")
MIN_TEMPERATURE = 1e-6  # the documented bound
NO_MODEL = "/nonexistent/model"

BAD = [
    ({"temperature": NAN}, "temperature must be 0 (greedy) or a positive finite number"),
    ({"temperature": INF}, "temperature must be 0 (greedy) or a positive finite number"),
    ({"temperature": 1e-300}, "temperature must be 0 (greedy) or at least 1e-06"),
    ({"temperature": 0.7, "seed": -1}, "seed must be"),
    ({"temperature": 0.7, "seed": 2**64}, "seed must be"),
    ({"temperature": 0.7, "top_p": NAN}, "top_p must be"),
]


def _one_sentence(text: str) -> bool:
    return text.endswith(".") and text.count(". ") == 0 and "\n" not in text


@pytest.mark.parametrize("kwargs, message", BAD)
def test_sampling_params_check_refuses(kwargs, message):
    with pytest.raises(ValueError) as err:
        SamplingParams(**kwargs).check()
    assert message.replace("top_p", "top-p") in str(err.value)
    assert _one_sentence(str(err.value))


@pytest.mark.parametrize("call", ["generate", "stream"])
@pytest.mark.parametrize("kwargs, message", BAD)
def test_library_refuses_before_loading_the_model(call, kwargs, message):
    """A model that does not exist would raise ModelError (not a ValueError) had the model been looked at."""
    with pytest.raises(ValueError) as err:
        getattr(drafting, call)("Hi", model=NO_MODEL, **kwargs)
    assert message in str(err.value).replace("--", "")
    assert _one_sentence(str(err.value))


@pytest.mark.parametrize("kwargs", [{"temperature": 0.0}, {"temperature": MIN_TEMPERATURE}, {"temperature": 0.7, "seed": 0},
                                    {"temperature": 0.7, "seed": 2**64 - 1}, {"temperature": 0.7, "top_p": 1.0}])
def test_edge_values_still_accepted(kwargs):
    SamplingParams(**kwargs).check()


def test_smallest_temperature_warps_to_a_distribution():
    """At the bound, logits of any real size divided by the temperature stay finite: a proper distribution."""
    logits = torch.randn(4, 1000, generator=torch.Generator().manual_seed(0)) * 1000
    probs = warp(logits, SamplingParams(temperature=MIN_TEMPERATURE))
    assert torch.isfinite(probs).all()
    assert torch.allclose(probs.sum(-1), torch.ones(4))
    assert math.isnan(float(warp(logits, SamplingParams(temperature=1e-300)).sum()))  # why the bound exists


CLI_BAD = [
    (["--temperature", "nan"], "--temperature must be 0 (greedy) or a positive finite number"),
    (["--temperature", "inf"], "--temperature must be 0 (greedy) or a positive finite number"),
    (["--temperature", "1e-300"], "--temperature must be 0 (greedy) or at least 1e-06"),
    (["--temperature", "0.7", "--seed", "-1"], "--seed must be a whole number from 0 to 2**64 - 1"),
    (["--temperature", "0.7", "--seed", str(2**64)], "--seed must be a whole number from 0 to 2**64 - 1"),
    (["--temperature", "0.7", "--top-p", "nan"], "--top-p must be in (0, 1]"),
]


def _assert_refused(out, message):
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("goose: ") and message in lines[0], out.stderr
    assert _one_sentence(lines[0])


# Every bad value is refused by SamplingParams.check (tested above, value by value); the CLI runs prove each command
# routes its options through it before the model loads, so one value of each kind per command is enough.
@pytest.mark.parametrize("args, message", [CLI_BAD[0], CLI_BAD[2], CLI_BAD[3], CLI_BAD[5]])
def test_bench_refuses_before_loading_the_model(args, message):
    _assert_refused(run_goose("bench", "examples/prompts.jsonl", "--model", NO_MODEL, *args, timeout=120), message)


@pytest.mark.parametrize("command", [["chat", "--plain"], ["viz", "--prompt", "hi"]])
@pytest.mark.parametrize("args, message", [CLI_BAD[0], CLI_BAD[4]])
def test_chat_and_viz_refuse_before_loading_the_model(command, args, message):
    _assert_refused(run_goose(*command, "--model", NO_MODEL, *args, timeout=120), message)
