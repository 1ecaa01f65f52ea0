"""Cost curves that stay true: the run's own one-row steps check the cached curve, which is measured again when
they disagree; one curve object per model, shared by every speculator."""

from __future__ import annotations

import pytest

from drafting.machine.cost_curve import CostCurve, PrefixCost
from drafting.machine.step_hooks import machine_hooks


def _far_off_curve() -> PrefixCost:
    # a curve claiming a one-row step takes 1000 s: slower than any real step, so the watch must re-measure it
    # whatever the machine's load (only a curve *faster* than the steps may be blamed on a busy machine)
    return PrefixCost(CostCurve(sizes=[1, 2, 4], seconds=[1000.0, 1100.0, 1300.0]))


def test_decode_steps_re_measure_a_curve_that_disagrees(tiny_lm):
    from dataclasses import replace

    from drafting.machine.curve_watch import WINDOW, watch, watch_of
    from drafting.engine.decode import Decoder
    from drafting.speculators import create

    lm = replace(tiny_lm, eos_ids=set())
    model = lm.model
    cost = _far_off_curve()
    fresh = PrefixCost(CostCurve(sizes=[1, 2, 4], seconds=[0.001, 0.0011, 0.0013]))
    calls = []

    def rebuild():
        from drafting.machine.cost_curve import measure

        calls.append(1)
        real = measure(lm, sizes=(1, 2, 4), prefix=16, repeats=1)
        return PrefixCost(real) if real.seconds else fresh

    try:
        w = watch(model, cost, rebuild)
        dec = Decoder(lm, create("ar"), hooks=machine_hooks())
        dec.generate([5, 17, 33, 2], WINDOW + 2)  # ar: every step has one row
        assert calls == [] and w.pending  # never inside a timed generation
        dec.generate([5, 17, 33, 2], 2)  # the next one measures before its clock starts
        assert calls == [1] and w.remeasured == 1 and not w.pending
        assert cost.short.seconds[0] < 1.0  # replaced in place: every holder of `cost` reads the new curve
        assert watch_of(model) is w
    finally:
        from drafting.machine import curve_watch

        curve_watch._WATCHES.pop(model, None)


def test_a_curve_still_off_after_measuring_is_measured_at_most_once_a_run_and_said_once(capsys, monkeypatch):
    """A curve that disagrees with the steps for a reason measuring cannot fix (a one-row probe unlike the
    run's own one-row steps) must not be measured before every generation: on a 1.5B model that is minutes each."""
    from drafting.machine import curve_watch
    from drafting.machine.curve_watch import MAX_REMEASURES, WINDOW, CurveWatch, take_notices

    monkeypatch.setattr(curve_watch, "_SAID", set())  # said once a process: an earlier test may have said it
    calls = []
    w = CurveWatch(_far_off_curve(), lambda: calls.append(1) or _far_off_curve())
    take_notices()
    for _ in range(MAX_REMEASURES + 3):
        for _ in range(WINDOW):
            w.observe(rows=1, prefix=100, seconds=0.01)
        w.settle()
    assert len(calls) == w.remeasured == MAX_REMEASURES
    said = capsys.readouterr().err.splitlines()
    assert len(said) == MAX_REMEASURES and all("measuring the cost curve again (one-row steps take" in s for s in said)
    kept = take_notices()
    assert len(kept) == 1 and kept[0].startswith("cost curve kept: one-row steps still take")


def test_tree_steps_do_not_count_as_one_row_checks():
    from drafting.machine.curve_watch import WINDOW, CurveWatch

    calls = []
    w = CurveWatch(_far_off_curve(), lambda: calls.append(1) or _far_off_curve())
    for _ in range(3 * WINDOW):
        w.observe(rows=8, prefix=100, seconds=0.01)
    assert calls == [] and w.ratios == []


def test_sane_curve_is_one_object_per_model(tiny_lm, tmp_path, monkeypatch):
    from drafting.machine import curve_watch
    from drafting.machine.verify_cost import sane_curve

    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    try:
        first = sane_curve(tiny_lm)
        assert sane_curve(tiny_lm) is first
        assert curve_watch.watch_of(tiny_lm.model).cost is first
    finally:
        curve_watch._WATCHES.pop(tiny_lm.model, None)


def test_notices_are_said_once():
    from drafting.machine.curve_watch import notice, take_notices

    take_notices()
    notice("test notice: first")
    notice("test notice: second")
    assert take_notices() == ["test notice: first"]
    assert take_notices() == []


def test_load_meter_reads_the_counters():
    from drafting.machine.load import LoadMeter

    import time

    with LoadMeter() as m:
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            pass
    if m.load is None:
        pytest.skip("no /proc counters here")
    assert m.load.others_cores >= 0 and m.load.own_cores >= 0 and m.load.cores >= 1
    assert "cores" in m.load.describe()


def test_plain_baseline_reads_one_row_points_and_listens_to_steps(tiny_lm):
    from dataclasses import replace

    from drafting.machine import curve_watch
    from drafting.engine.decode import Decoder
    from drafting.machine.plain_speed import PlainBaseline
    from drafting.speculators import create

    lm = replace(tiny_lm, eos_ids=set())
    curve_watch._WATCHES.pop(lm.model, None)
    try:
        base = PlainBaseline(lm)  # no budget curve held: one-row forwards timed now, not a full curve
        assert base.cost.short.sizes == [1] and base.step_s(300) > 0
        assert curve_watch.watch_of(lm.model) is None  # never the curve budgets would read
        Decoder(lm, create("ar"), hooks=machine_hooks()).generate([5, 17, 33, 2], 3)
        assert base.watch.last_prefix is not None and base.step_s() == base.cost.at(base.watch.last_prefix).time(1)
    finally:
        curve_watch._LISTENERS.pop(lm.model, None)


def test_a_cached_curve_of_other_sizes_is_measured_again(tiny_lm, tmp_path, monkeypatch):
    """A curve cached by an older goose (powers of two only) would price trees between its points by a straight
    line; the cache hands back only curves of today's sizes."""
    import json

    from drafting.machine.cost_curve import DEFAULT_SIZES, cost_curve, store_curve

    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    old = CostCurve(sizes=[1, 2, 4, 8, 16, 32, 64, 128], seconds=[1.0 + i for i in range(8)])
    store_curve(tiny_lm, 256, old)
    curve = cost_curve(tiny_lm)
    assert tuple(curve.sizes) == DEFAULT_SIZES and curve.seconds[0] < 1.0
    stored = json.loads(next((tmp_path / "cost").glob("*.json")).read_text())
    if tuple(stored["sizes"]) == DEFAULT_SIZES:  # stored in place of the old one (not when the machine was busy)
        assert cost_curve(tiny_lm).seconds == stored["seconds"]  # and read back from the cache, not measured
    else:
        assert stored["seconds"] == old.seconds


@pytest.mark.parametrize("busy", [1.0, 2.0])
def test_drafted_steps_set_the_price_of_extra_rows(busy):
    """Drafted steps whose rows past the first cost 1.5 times what the curve says make the curve price them so,
    judged against the one-row steps around them (a machine twice as slow for both says the same)."""
    from drafting.machine.curve_watch import WINDOW, CurveWatch

    cost = PrefixCost(CostCurve(sizes=[1, 2, 4], seconds=[1.0, 1.5, 2.5]))
    w = CurveWatch(cost, rebuild=lambda: cost)
    for _ in range(WINDOW):
        w.observe(4, 100, busy * 3.25)  # before any one-row window: no yardstick yet, ignored
    assert cost.extra_rows == 1.0
    for _ in range(WINDOW):
        w.observe(1, 100, busy * 1.0)
    for _ in range(WINDOW):
        w.observe(4, 100, busy * (1.0 + 1.5 * 1.5))
    assert cost.extra_rows == pytest.approx(1.5)
    assert cost.at(100).time(4) == pytest.approx(3.25) and cost.at(100).time(2) == pytest.approx(1.75)
    assert cost.at(100).time(1) == 1.0 and cost.at(100, measured=True).time(4) == 2.5
