"""The verification cost curve: seconds per forward pass as a function of the rows it carries.

Measured once per model, device and dtype (a few seconds) and cached as JSON under the goose cache folder.
Tree budgets (GOOSE ``budget=auto``, PTD rows ``auto``) read it to decide how many nodes pay on this hardware.
Extra rows cost more after a long prompt (each attends over the whole cache), so ``PrefixCost`` keeps the
curve at two cache lengths and interpolates between them for the step at hand.

A cached curve can be wrong for this run (measured while the machine was busy, or the machine is busy now).
``CurveWatch`` compares it with the run's own one-row steps (the decode loop reports them through
``note_step``): when their median differs by more than ``DRIFT`` the curve is measured again, in place, so every
budget reading it follows; when other processes hold the cores at that moment the curve is left alone and the
run says once (``take_notices``) that the machine is oversubscribed.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from drafting.disk_cache import DiskCache
from drafting.engine.forward import TRANSFORMERS
from drafting.engine.loaded_model import LoadedModel
from drafting.engine.tree import Draft, DraftTree
from drafting.machine.identity import device_name
from drafting.machine.load import LoadMeter

# The points are close where CPU kernels change path: up to 8 rows (torch's own call for the few-row products it
# does faster, drafting.weights.mkl: a 3-row forward costs far less than halfway between 2 and 4) and between 8
# and 32 (MKL's small-row product stops at 16 rows; a straight line from 16 to 32 prices 17-24 rows far too low).
DEFAULT_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 20, 24, 32, 48, 64, 128)
SMALL_ROWS = 8


@dataclass
class CostCurve:
    sizes: list[int]
    seconds: list[float]  # median seconds of one forward with that many rows
    # measured twice on a quiet machine with bumps both times: the kernels' own shape, not a busy machine's
    # spikes (drafting.machine.verify_cost), so later runs use it as it is instead of measuring it again
    confirmed: bool = False
    # a plain step's seconds as measured, where monotone() lowered the first point to a larger size's cost
    # (a format whose 3 rows run faster than 1): what the run's own one-row steps are compared with
    one_row_s: float | None = None

    def one_row(self) -> float:
        return self.one_row_s if self.one_row_s is not None else self.seconds[0]

    def time(self, n: int) -> float:
        """Seconds for a forward of ``n`` rows, interpolated linearly (extrapolated past the last size)."""
        s, t = self.sizes, self.seconds
        n = max(1, n)
        if n <= s[0]:
            return t[0]
        i = bisect_left(s, n)
        if i >= len(s):
            slope = (t[-1] - t[-2]) / (s[-1] - s[-2])
            return t[-1] + slope * (n - s[-1])
        if s[i] == n:
            return t[i]
        frac = (n - s[i - 1]) / (s[i] - s[i - 1])
        return t[i - 1] + frac * (t[i] - t[i - 1])

    def relative(self, n: int) -> float:
        """Cost of ``n`` rows relative to a one-row step."""
        return self.time(n) / self.seconds[0]


SHORT_PREFIX = 256
LONG_PREFIX = 1536


@dataclass
class PrefixCost:
    """Cost curves after ``short_prefix`` and ``long_prefix`` cached tokens; ``at(prefix)`` interpolates
    (and extrapolates) each size linearly in the cache length."""

    short: CostCurve
    long: CostCurve | None = None
    short_prefix: int = SHORT_PREFIX
    long_prefix: int = LONG_PREFIX
    # what the run's own drafted steps say their rows past the first cost, as a multiple of what the curves say
    # (drafting.machine.curve_watch): a curve measured in another run, or on other shapes, can price them low
    extra_rows: float = 1.0

    def _mix(self, short: float, long: float, prefix: int) -> float:
        """One size's seconds after ``prefix`` cached tokens. Below ``short_prefix`` the line goes on down (a step
        after a 100-token prompt costs clearly less than after 256: on the embedded model on llama.cpp, 0.8 of
        it), to half the short curve's figure at most: the weights' part of a step does not shrink."""
        f = (max(0, prefix) - self.short_prefix) / (self.long_prefix - self.short_prefix)
        seconds = short + f * (long - short)
        return seconds if f >= 0 else max(seconds, 0.5 * short)

    def one_row(self, prefix: int) -> float:
        """``at(prefix).one_row()`` without building the curve (read on every one-row step)."""
        if self.long is None:
            return self.short.one_row()
        return self._mix(self.short.one_row(), self.long.one_row(), prefix)

    def at(self, prefix: int, measured: bool = False) -> CostCurve:
        """The curve after ``prefix`` cached tokens, its rows past the first scaled by ``extra_rows`` (as measured:
        ``measured=True``)."""
        if self.long is None:
            curve = self.short
        else:
            seconds = [self._mix(a, b, prefix) for a, b in zip(self.short.seconds, self.long.seconds)]
            curve = CostCurve(sizes=list(self.short.sizes), seconds=seconds, one_row_s=self.one_row(prefix))
        if measured or self.extra_rows == 1.0:
            return curve
        one = curve.seconds[0]
        return CostCurve(sizes=list(curve.sizes), seconds=[one + self.extra_rows * (s - one) for s in curve.seconds],
                         one_row_s=curve.one_row_s)


def at_two_lengths(lm: LoadedModel, curve_at: Callable[[int], CostCurve]) -> PrefixCost:
    """``curve_at(prefix)`` after ``SHORT_PREFIX`` cached tokens and after a long cache: ``LONG_PREFIX``, or
    less where the context cannot hold that and the largest tree after it; a context too short for a long
    cache at least twice the short one keeps the short curve alone."""
    long_prefix = min(LONG_PREFIX, lm.max_context - max(DEFAULT_SIZES) - 1)
    short = curve_at(SHORT_PREFIX)
    if long_prefix < 2 * SHORT_PREFIX:
        return PrefixCost(short)
    return PrefixCost(short, curve_at(long_prefix), SHORT_PREFIX, long_prefix)


def curve_key(lm: LoadedModel, prefix: int) -> str:
    """What decides a curve: model, device (the GPU's model on CUDA), dtype, thread count, cache length, weight
    format and engine (another engine's key part names its threads, offload and build: ``weights_key``)."""
    if lm.engine != TRANSFORMERS:
        return f"{lm.name}|{lm.engine}|{lm.weights_key}|{prefix}"
    key = f"{lm.name}|{device_name(lm.device)}|{lm.dtype}|{torch.get_num_threads()}|{prefix}"
    weights = getattr(lm, "weights", "float")
    if weights != "float":  # float keeps the key of curves cached before weight formats existed
        key += f"|{getattr(lm, 'weights_key', None) or weights}"
    return key


def _parse_curve(doc: dict, key: str) -> CostCurve | None:
    """A stored curve, if it has today's sizes (an older goose's powers of two are measured again)."""
    curve = CostCurve(sizes=[int(n) for n in doc["sizes"]], seconds=[float(s) for s in doc["seconds"]],
                      confirmed=doc.get("confirmed") is True)
    ok = tuple(curve.sizes) == DEFAULT_SIZES and len(curve.seconds) == len(curve.sizes)
    return curve if ok else None


# a curve measured while other processes held the cores is used by its run but not kept
CURVES = DiskCache("cost", parse=_parse_curve)


def measure(lm: LoadedModel, sizes=DEFAULT_SIZES, prefix: int = SHORT_PREFIX, repeats: int = 3,
            limit_s: float | None = None) -> CostCurve:
    """Time one forward of each size after ``prefix`` cached tokens (a star: the path real trees take, a full 4-D
    tree mask on transformers, one sequence per leaf on llama.cpp), on the model's own engine. With ``limit_s``, a
    first size slower than that ends the measurement there (the curve keeps one point)."""
    fwd = lm.make_forward(lm, None)
    gen = torch.Generator().manual_seed(0)
    vocab = min(lm.vocab_size, 32000)
    low = 100 if vocab > 200 else 0  # skip special ids, except in tiny test vocabularies
    ids = torch.randint(low, vocab, (prefix + max(sizes) + 1,), generator=gen).tolist()
    cache = fwd.new_cache()
    fwd.prefill(ids[:prefix], cache, logit_rows=1)  # every row's logits would be gigabytes on a large vocabulary
    seconds = []
    for n in sizes:
        tree = DraftTree(ids[prefix])
        # a star keeps the 4-D mask path that real trees take (a plain chain would use the causal fast path)
        for t in ids[prefix + 1 : prefix + n]:
            tree.add(t, 0, "probe")
        draft = Draft(tree=tree)
        times = []
        # small steps are cheap to repeat and the budget reads their differences (a few ms), so they get more
        for r in range((repeats if n > SMALL_ROWS else 2 * repeats + 1) + 1):
            t0 = fwd.clock.mark()
            fwd.step(draft, cache)
            t1 = fwd.clock.mark()
            fwd.clock.settle()
            if r:  # the first run warms up this shape
                times.append(fwd.clock.seconds(t0, t1))
            fwd.crop(cache, prefix)
            if limit_s is not None and not seconds and times and times[0] > limit_s:
                break  # one timed forward is enough to know it is too slow
        seconds.append(sorted(times)[len(times) // 2])
        if limit_s is not None and seconds[0] > limit_s:
            break
    return CostCurve(sizes=list(sizes)[: len(seconds)], seconds=seconds)


def cost_curve(lm: LoadedModel, prefix: int = SHORT_PREFIX, refresh: bool = False) -> CostCurve:
    """The cached curve for this model, device, dtype, weight format and thread count; measured when missing
    (and stored, unless other processes held the cores meanwhile)."""
    cached = None if refresh else CURVES.read(curve_key(lm, prefix))
    return cached if cached is not None else measured_curve(lm, prefix)


def measured_curve(lm: LoadedModel, prefix: int, confirm: Callable[[CostCurve], bool] | None = None) -> CostCurve:
    """A curve measured now and stored, unless other processes held the cores meanwhile; on a quiet machine,
    ``confirm(curve)`` says whether to mark it ``confirmed``."""
    with LoadMeter() as meter:
        curve = measure(lm, prefix=prefix)
    busy = meter.load is not None and meter.load.busy
    curve.confirmed = confirm is not None and not busy and confirm(curve)
    store_curve(lm, prefix, curve, busy=busy)
    return curve


def store_curve(lm: LoadedModel, prefix: int, curve: CostCurve, busy: bool = False) -> None:
    """Make ``curve`` the cached one for this model and mode (what later tree budgets read), unless it was
    measured on a busy machine."""
    CURVES.write(curve_key(lm, prefix), asdict(curve), busy=busy)
