"""Keeps a cost curve true to the run: checks it against the run's own one-row steps and re-measures it.

Tree budgets read a verify cost curve (drafting.machine.cost_curve) that is usually cached from an earlier run. If that run was
disturbed, or this machine is busy now, the curve no longer says what a step costs. The decode loop reports
every step (``note_step``); a watch registered for the model (``watch``) collects the one-row steps, and every
``WINDOW`` of them compares their median with the curve's one-row time at their cache length:

- off by more than ``DRIFT`` while the machine is otherwise quiet: the curve is measured again before the next
  generation starts its clock (``settle``) and replaced in place (every speculator holding it sees the new one);
- slower by more than ``DRIFT`` while other processes hold the cores: the machine is oversubscribed; the curve
  is kept (a busy machine's figures must not shape later runs) and one notice says so (``take_notices``).

The drafted steps are checked too, against the one-row steps around them: what their rows past the first cost,
relative to the curve's price for them, becomes the curve's ``extra_rows`` (the median of each ``WINDOW`` of
them). A curve measured on a quieter machine, or on a star where the run verifies chains, can price extra rows
too low on an engine whose batches cost nearly their size; budgets then draft what does not pay.

Measuring takes seconds on a small model and minutes on a large one, so a re-measure says so on stderr when it
starts, and a watch measures at most ``MAX_REMEASURES`` times: a curve still off after that disagrees with the
steps for a reason measuring again cannot fix, and a notice says it is kept. The steps are compared with the
one-row time as measured (``CostCurve.one_row``), not the monotone curve's first point, which a format whose
few-row steps beat a one-row step lowers below what a plain step costs.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import replace
from typing import Callable

from drafting.engine.loaded_model import LoadedModel
from drafting.machine.load import LoadMeter

DRIFT = 0.25
WINDOW = 8  # one-row steps per check
MAX_REMEASURES = 1  # per watch and process

# keyed weakly by the model: a watch must never hold its model (see ``detached``), or the model lives for ever
_WATCHES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> CurveWatch
_LISTENERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> further watches
_NOTICES: list[str] = []
_SAID: set[str] = set()


class CurveWatch:
    def __init__(self, cost, rebuild: Callable[[], object]):
        self.cost = cost  # drafting.machine.cost_curve.PrefixCost, replaced in place on a re-measure
        self.rebuild = rebuild  # measures afresh and returns a new PrefixCost; holds its model weakly (``detached``)
        self.ratios: list[float] = []
        self.one_row_ratio: float | None = None  # the latest window's one-row steps against the curve
        self.extra: list[float] = []  # drafted steps' extra rows against the curve's price for them
        self.remeasured = 0
        self.busy: str | None = None  # set once the machine was seen oversubscribed
        self.last_prefix: int | None = None  # cache length of the latest step (any size)
        self.pending = False  # found off: measure again at the next settle()
        self.why = ""  # what the steps said when the curve was last found off
        self._meter = LoadMeter().start()

    def observe(self, rows: int, prefix: int, seconds: float) -> None:
        self.last_prefix = prefix
        if seconds <= 0:
            return
        if rows > 1:
            self._observe_drafted(rows, prefix, seconds)
            return
        self.ratios.append(seconds / self.cost.one_row(prefix))
        if len(self.ratios) >= WINDOW:
            self._check()

    def _observe_drafted(self, rows: int, prefix: int, seconds: float) -> None:
        if self.one_row_ratio is None or rows > self.cost.short.sizes[-1]:
            return
        curve = self.cost.at(prefix, measured=True)
        priced = curve.time(rows) - curve.time(1)
        if priced <= 0:
            return
        # the step in the curve's units (its one-row steps as the latest window found them), less a one-row step
        self.extra.append((seconds / self.one_row_ratio - self.cost.one_row(prefix)) / priced)
        if len(self.extra) >= WINDOW:
            self.cost.extra_rows = min(4.0, max(0.5, sorted(self.extra)[len(self.extra) // 2]))
            self.extra = []

    def _check(self) -> None:
        ratio = sorted(self.ratios)[len(self.ratios) // 2]
        self.one_row_ratio = ratio
        load = self._meter.stop()
        self.ratios = []
        if 1 / (1 + DRIFT) <= ratio <= 1 + DRIFT:
            self.busy = None
        elif ratio > 1 + DRIFT and load is not None and load.busy:
            self.busy = f"one-row steps take {ratio:.1f}x the cost curve and {load.describe()}"
            notice(f"machine oversubscribed: {self.busy}; this run's speed is not this machine's.")
        elif self.remeasured < MAX_REMEASURES:
            self.pending = True  # measured again by settle(), outside any timed generation
            self.why = f"one-row steps take {ratio:.2f}x what it says"
        else:
            notice(f"cost curve kept: one-row steps still take {ratio:.2f}x what it says after measuring it again "
                   f"{self.remeasured} times, so goose leaves it as it is for this run.")
        self._meter = LoadMeter().start()

    def settle(self) -> None:
        # the load is read over this run's steps only: between runs a bench runs other rows (llama.cpp's own
        # server among them), whose cores are not others' while this run decodes
        self._meter.start()
        if not self.pending:
            return
        self.pending = False
        print(f"goose: measuring the cost curve again ({self.why}); the next run starts after it.",
              file=sys.stderr, flush=True)
        fresh = self.rebuild()
        self.cost.short, self.cost.long = fresh.short, fresh.long
        self.cost.short_prefix, self.cost.long_prefix = fresh.short_prefix, fresh.long_prefix
        self.cost.extra_rows, self.extra = 1.0, []
        self.remeasured += 1
        self._meter = LoadMeter().start()


def detached(lm: LoadedModel, measure: Callable[[LoadedModel], object]) -> Callable[[], object]:
    """``measure(lm)`` as a watch's ``rebuild`` that holds the network weakly, and ``lm`` not at all: a watch is a
    value of a table keyed weakly by the model, so one that held its model would keep it alive for the life of
    the process. Called only while a run on the model starts (``settle``), when the model is alive."""
    net = weakref.ref(lm.model)
    description = replace(lm, model=None, verify_cost=None)  # what measuring reads besides the network

    def rebuild():
        model = net()
        if model is None:
            raise RuntimeError("The model of this cost curve was freed; nothing is left to measure.")
        return measure(replace(description, model=model))

    return rebuild


def watch(model, cost, rebuild: Callable[[], object]) -> CurveWatch:
    """Register (or return) the watch of ``model``'s curve."""
    w = _WATCHES.get(model)
    if w is None or w.cost is not cost:
        w = _WATCHES[model] = CurveWatch(cost, rebuild)
    return w


def watch_of(model) -> CurveWatch | None:
    return _WATCHES.get(model)


def listen(model, w: CurveWatch) -> CurveWatch:
    """Feed ``w`` with ``model``'s steps too, without making its curve the one budgets read (a one-row-only
    curve, as a plain-decoding baseline keeps)."""
    _LISTENERS.setdefault(model, []).append(w)
    return w


def _all(model) -> list[CurveWatch]:
    w = _WATCHES.get(model)
    return ([w] if w is not None else []) + _LISTENERS.get(model, [])


def note_step(model, rows: int, prefix: int, seconds: float) -> None:
    """A step of ``rows`` rows after ``prefix`` cached tokens took ``seconds`` (forward and acceptance)."""
    for w in _all(model):
        w.observe(rows, prefix, seconds)


def settle(model) -> None:
    """Re-measure ``model``'s curve if its watch found it off; the decode loop calls this before a generation
    starts its clock, so the measurement never lands inside a timed run."""
    for w in _all(model):
        w.settle()


def notice(text: str) -> None:
    """Queue a line for the user, once per process."""
    if text.split(":")[0] not in _SAID:
        _SAID.add(text.split(":")[0])
        _NOTICES.append(text)


def take_notices() -> list[str]:
    out = list(_NOTICES)
    _NOTICES.clear()
    return out
