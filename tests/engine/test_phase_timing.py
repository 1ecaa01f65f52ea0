"""Decode-loop timing on CPU: phase marks are plain host clocks there, outputs are unchanged, and the phases
of every step add up within the run's wall time."""

from __future__ import annotations

import random

import pytest

from drafting.engine.decode import Decoder
from drafting.engine.phase_clock import PhaseClock, model_devices
from drafting.speculators import create
from drafting.engine.hf.static_shapes import StaticShapes


def _prompt():
    rng = random.Random(3)
    seg = [rng.randrange(2, 120) for _ in range(12)]
    return seg + [4, 5, 6] + seg + seg[:5]


def test_cpu_model_has_no_cuda_devices_and_the_clock_is_the_host_clock(tiny_lm):
    assert model_devices(tiny_lm.model) == []
    clock = PhaseClock.for_model(tiny_lm.model)
    a = clock.mark()
    b = clock.mark()
    assert isinstance(a, float) and clock.seconds(a, b) >= 0.0
    clock.settle()  # nothing to wait for on CPU


@pytest.mark.parametrize("spec", ["pld", "goose", "ptd"])
def test_timed_phases_are_sane_and_output_equals_ar(tiny_lm, spec):
    ids = _prompt()
    ref = Decoder(tiny_lm, create("ar")).generate(ids, 48)
    res = Decoder(tiny_lm, create(spec)).generate(ids, 48)
    assert res.output_ids == ref.output_ids
    for r in (ref, res):
        assert r.prefill_s > 0.0
        assert all(rec.draft_s >= 0.0 and rec.verify_s > 0.0 for rec in r.records)
        assert r.draft_s == pytest.approx(sum(rec.draft_s for rec in r.records))
        assert r.verify_s == pytest.approx(sum(rec.verify_s for rec in r.records))
        assert r.prefill_s + r.draft_s + r.verify_s <= r.wall_s


@pytest.mark.heavy  # compiles the step: about a minute on two CPU cores
def test_compiled_static_step_equals_plain_decoding_on_cpu(monkeypatch):
    """The compiled step traces goose's grouped attention (no KV copy inside the graph either) and decodes as the
    eager steps do."""
    from support.flat_cost import priced_flat
    from support.tinymodel import tiny_llama
    from test_no_kv_copy import refuse_repeat_kv

    from drafting.engine.hf.attention import NAME

    # flat pricing: goose drafts, so the tree sizes are traced too, however busy the machine
    tiny_lm = priced_flat(tiny_llama(128, 64, 512, bos=1, eos_ids={127}, name="tiny-compiled"))
    ids = _prompt()
    shapes = StaticShapes(buckets=(1, 16, 64), compile=True)
    for spec in ("ar", "goose"):
        ref = Decoder(tiny_lm, create(spec)).generate(ids, 30).output_ids
        refuse_repeat_kv(monkeypatch)
        dec = Decoder(tiny_lm, create(spec), static_shapes=shapes)
        assert tiny_lm.model.config._attn_implementation == NAME
        assert dec.generate(ids, 30).output_ids == ref
        assert dec.generate(ids, 30).output_ids == ref  # replayed, not recompiled
