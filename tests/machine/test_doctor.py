"""`goose doctor`'s honesty and thrift: a mode far slower than the fastest is timed once and reported, the
auto choice is derived from the table, and busy-machine figures are flagged."""

from __future__ import annotations

import copy
import time
from dataclasses import replace

import pytest
import torch
from support.cli import run_goose

SLEEP_S = 0.3  # far longer than a forward of the tiny model


class Sleepy(torch.nn.Module):
    """A real layer made slow: the wrapped module, after a sleep."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        time.sleep(SLEEP_S)
        return self.inner(*args, **kwargs)


def _loader(tiny_lm, slow_modes):
    def load(model, device, dtype, weights):
        from drafting.weights.formats import apply_format

        net = copy.deepcopy(tiny_lm.model)
        if weights != "float":
            net = apply_format(net, weights)
        if (dtype, weights) in slow_modes:
            net.model.norm = Sleepy(net.model.norm)
        return replace(tiny_lm, model=net, weights=weights)

    return load


def test_a_far_slower_mode_is_timed_once_and_reported(tiny_lm, monkeypatch):
    from drafting.machine import doctor
    from drafting.machine.doctor import Mode, fastest, profile_modes

    # the tiny model's steps take well under a millisecond, so one preempted step on a shared machine is 5x the
    # fastest; 50x still leaves the sleeping mode (SLEEP_S a step) far beyond the limit
    monkeypatch.setattr(doctor, "GIVE_UP", 50.0)
    modes = [Mode("float32", "float"), Mode("float32", "onednn"), Mode("float32", "dual")]
    profiles, _ = profile_modes(None, "cpu", modes, sizes=(1, 4, 16), prefix=16, repeats=2, stop_when_busy=False,
                                loader=_loader(tiny_lm, {("float32", "onednn")}))
    fast, slow, other = profiles
    assert fast.gave_up is None and fast.sizes == [1, 4, 16] and fast.prefill_tokens_per_s > 0
    assert slow.gave_up and "not timed further" in slow.gave_up
    assert slow.sizes == [1] and len(slow.seconds) == 1 and slow.seconds[0] >= SLEEP_S
    assert other.gave_up is None and other.sizes == [1, 4, 16]
    assert fastest(profiles) is not slow


def test_weights_choice_is_read_from_the_table(tiny_lm):
    from drafting.machine.doctor import ModeProfile, format_choices

    def row(w, secs):
        return ModeProfile(mode=f"float32+{w}", dtype="float32", weights=w, sizes=[1, 4, 16], seconds=secs,
                           fingerprint={"x": 1} if w == "float" else None)

    (fp, choice), = format_choices([row("float", [0.030, 0.045, 0.062]), row("onednn", [0.037, 0.042, 0.058]),
                                     row("dual", [0.030, 0.042, 0.058])])
    assert fp == {"x": 1} and choice.weights == "dual" and choice.rows == [1, 16]
    assert choice.seconds == {"float": [0.030, 0.062], "onednn": [0.037, 0.058]}
    (_, choice), = format_choices([row("float", [0.030, 0.045, 0.050]), row("onednn", [0.037, 0.042, 0.058])])
    assert choice.weights == "float"


def test_doctor_help_says_the_default_run_is_short():
    proc = run_goose("doctor", "--help", timeout=60)
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "--even-if-busy" in text and "1, 4 and 16 rows" in text


@pytest.mark.slow
@pytest.mark.heavy  # a whole doctor in a fresh process and a fresh cache: the model is converted again
def test_doctor_writes_the_choice_that_auto_then_uses(tmp_path):
    import json

    out = tmp_path / "doctor.json"
    proc = run_goose("doctor", "--modes", "float32+float,float32+onednn", "--repeats", "1", "--prefix", "32",
                     "--even-if-busy", "--json", str(out), timeout=300, GOOSE_CACHE=str(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert [m["mode"] for m in doc["modes"]] == ["float32", "float32+onednn"]
    if doc["busy"] is None and all(m["gave_up"] is None for m in doc["modes"]):  # a busy machine can leave a mode out
        assert "--weights auto chose" in proc.stdout
        chosen = doc["weights_auto"][0]["weights"]
        cached = list((tmp_path / "cache" / "modes").glob("*.json"))
        assert len(cached) == 1 and json.loads(cached[0].read_text())["choice"]["weights"] == chosen
