"""A verify cost curve whose bumps come back when it is measured again on a quiet machine is this machine's own
shape (a format's few-row path slower than its next size): kept and trusted by the next process, instead of
measured twice at every start as a busy machine's spikes are."""

from __future__ import annotations

import pytest

from drafting.machine import verify_cost
from drafting.machine.cost_curve import DEFAULT_SIZES, CURVES, CostCurve, cost_curve, curve_key, store_curve
from drafting.machine.load import Load

# shaped like one-thread `dual` weights on an AVX-512 CPU without AMX, where 2 rows cost more than 3 to 6
BUMPY_MS = [60.0, 80.0, 55.0, 54.0, 52.0, 64.0, 71.0, 85.0, 98.0, 118.0, 143.0, 186.0, 249.0, 430.0]


def bumpy_curve() -> CostCurve:
    return CostCurve(sizes=list(DEFAULT_SIZES), seconds=[ms / 1000 for ms in BUMPY_MS])


class Meter:
    """The load meter with a machine state chosen by the test."""

    busy = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.load = Load(others_cores=2.0 if Meter.busy else 0.0, steal_cores=0.0, own_cores=1.0, cores=2, wall_s=1.0)


@pytest.fixture
def bumpy(monkeypatch, tmp_path):
    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    monkeypatch.setattr("drafting.machine.cost_curve.LoadMeter", Meter)
    calls = []

    def measure(lm, prefix=256, **kw):
        calls.append(prefix)
        return bumpy_curve()

    monkeypatch.setattr("drafting.machine.cost_curve.measure", measure)
    return calls


def test_bumps_that_come_back_are_kept_and_trusted_next_time(tiny_lm, bumpy):
    assert not verify_cost.is_sane(bumpy_curve())  # what the check was made for: it looks like a spike
    first = verify_cost.checked(tiny_lm, 256, cost_curve(tiny_lm, prefix=256))
    assert bumpy == [256, 256] and first.confirmed  # measured, failed the check, measured again: the same
    bumpy.clear()
    again = verify_cost.checked(tiny_lm, 256, cost_curve(tiny_lm, prefix=256))  # the next process
    assert bumpy == [] and again.confirmed and again.seconds == first.seconds


def test_bumps_measured_on_a_busy_machine_are_not_trusted(tiny_lm, bumpy):
    Meter.busy = True
    try:
        store_curve(tiny_lm, 256, bumpy_curve())
        curve = verify_cost.checked(tiny_lm, 256, cost_curve(tiny_lm, prefix=256))
    finally:
        Meter.busy = False
    assert bumpy == [256] and not curve.confirmed  # used by this run, never marked as the machine's own
    assert CURVES.read(curve_key(tiny_lm, 256)).confirmed is False


def test_plain_steps_are_compared_with_the_one_row_time_as_measured():
    """monotone() lowers a one-row point that costs more than 3 rows; plain steps at the measured one-row time
    must not look off (they did by 1.2x, and the curve was measured again run after run)."""
    from drafting.machine.cost_curve import PrefixCost
    from drafting.machine.curve_watch import WINDOW, CurveWatch
    from drafting.machine.plain_speed import PlainBaseline

    raw = CostCurve(sizes=[1, 2, 3, 4], seconds=[0.062, 0.065, 0.052, 0.053])
    curve = verify_cost.monotone(raw)
    assert curve.seconds[0] == 0.052 and curve.one_row() == 0.062
    cost = PrefixCost(curve, verify_cost.monotone(CostCurve(sizes=[1, 2, 3, 4], seconds=[0.080, 0.090, 0.070, 0.075])))
    assert cost.at(256).one_row() == pytest.approx(0.062) and cost.at(cost.long_prefix).one_row() == pytest.approx(0.080)
    w = CurveWatch(cost, lambda: pytest.fail("measured again"))
    for _ in range(3 * WINDOW):
        w.observe(rows=1, prefix=256, seconds=0.063)
    assert not w.pending
    plain = PlainBaseline.__new__(PlainBaseline)
    plain.watch, plain.cost = w, cost
    assert plain.step_s(256) == pytest.approx(0.062)
