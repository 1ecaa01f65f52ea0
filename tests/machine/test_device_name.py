"""Timing caches name a GPU by its model, not by ``cuda``: a cost curve or weight-format choice measured on one GPU
is not read back on another kind reading the same cache, while the CPU's keys stay as they were cached. The GPU's
name comes from a stand-in for torch.cuda.get_device_name, so this runs without a GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from drafting.machine.cost_curve import curve_key
from drafting.machine.identity import device_name
from drafting.weights.probe import fingerprint

GPUS = {0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA A100-SXM4-40GB"}


@pytest.fixture
def two_gpus(monkeypatch):
    asked = []

    def name(device=None):
        asked.append(device)
        return GPUS[torch.device(device).index or 0]

    monkeypatch.setattr(torch.cuda, "get_device_name", name)
    return asked


def test_a_gpu_is_named_by_its_model_and_the_cpu_as_before(two_gpus):
    assert device_name(torch.device("cuda:0")) == GPUS[0]
    assert device_name("cuda:1") == GPUS[1]
    assert [torch.device(d) for d in two_gpus] == [torch.device("cuda:0"), torch.device("cuda:1")]
    assert device_name(torch.device("cpu")) == "cpu"


def test_cost_curves_of_two_gpu_models_have_their_own_keys(tiny_lm, two_gpus):
    h100 = curve_key(replace(tiny_lm, name="tiny", device=torch.device("cuda:0")), 256)
    a100 = curve_key(replace(tiny_lm, name="tiny", device=torch.device("cuda:1")), 256)
    assert GPUS[0] in h100 and GPUS[1] in a100 and h100.replace(GPUS[0], GPUS[1]) == a100
    assert "|cuda" not in h100
    assert curve_key(replace(tiny_lm, name="tiny"), 256).startswith("tiny|cpu|")


def test_weight_format_choices_of_two_gpu_models_have_their_own_keys(tiny_lm, two_gpus):
    on = [fingerprint(tiny_lm.model, "tiny", torch.device(f"cuda:{i}"), torch.bfloat16) for i in (0, 1)]
    assert [fp["device"] for fp in on] == [GPUS[0], GPUS[1]]
    assert fingerprint(tiny_lm.model, "tiny", torch.device("cpu"), torch.float32)["device"] == "cpu"
