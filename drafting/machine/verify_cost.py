"""The verify cost curves the budget rule reads: cached ones checked for spikes from a busy machine, measured again if spoilt, made monotone, and watched against the run's own steps."""

from __future__ import annotations

from drafting.engine.loaded_model import LoadedModel
from drafting.machine.cost_curve import CostCurve, PrefixCost, at_two_lengths, cost_curve, measured_curve
from drafting.machine.curve_watch import detached, watch, watch_of


def is_sane(curve, slack: float = 1.3, noise_s: float = 0.002) -> bool:
    """A verify cost curve measured on a busy machine can hold spikes; more rows never cost less (beyond
    ``slack`` and timer noise)."""
    t, n = curve.seconds, curve.sizes
    rising = all(t[i] <= slack * min(t[i + 1 :]) + noise_s for i in range(len(t) - 1))
    # nor do they cost more than in proportion to the rows (the last point has no later one to check it)
    return rising and all(t[i + 1] <= slack * t[i] * n[i + 1] / n[i] + noise_s for i in range(len(t) - 1))


def monotone(curve):
    """The curve with each point lowered to the cheapest larger size and capped at proportional growth
    (removes upward spikes)."""
    t, n = list(curve.seconds), curve.sizes
    for i in range(1, len(t)):
        t[i] = min(t[i], t[i - 1] * n[i] / n[i - 1])
    for i in range(len(t) - 2, -1, -1):
        t[i] = min(t[i], t[i + 1])
    return CostCurve(sizes=list(curve.sizes), seconds=t, confirmed=curve.confirmed, one_row_s=curve.one_row())


def sane_curve(lm):
    """The model's cached verify cost curves (``drafting.machine.cost_curve.PrefixCost``), measured again if they look
    taken on a busy machine, then made monotone; one object per model, shared by every speculator with an
    ``auto`` budget and kept true to the run's own steps by drafting.machine.curve_watch."""
    have = watch_of(lm.model)
    if have is not None:
        return have.cost
    result = _build(lm)
    watch(lm.model, result, detached(lm, lambda again: _build(again, refresh=True)))
    return result


def checked(lm: LoadedModel, prefix: int, curve: CostCurve) -> CostCurve:
    """``curve``, or where it fails ``is_sane`` a new measurement. A new one that fails too, on a quiet machine,
    is the kernels' own shape (a format's few-row path can be slower than its next size): a busy machine's
    spikes do not come back on a quiet one. It is kept as ``confirmed``, so the next process trusts it instead
    of measuring it twice again at every start."""
    if curve.confirmed or is_sane(curve):
        return curve
    return measured_curve(lm, prefix, confirm=lambda again: not is_sane(again))


def _build(lm: LoadedModel, refresh: bool = False) -> PrefixCost:
    cost = at_two_lengths(lm, lambda prefix: checked(lm, prefix, cost_curve(lm, prefix=prefix, refresh=refresh)))
    long = monotone(cost.long) if cost.long is not None else None
    return PrefixCost(monotone(cost.short), long, cost.short_prefix, cost.long_prefix)


def with_verify_cost(lm: LoadedModel) -> LoadedModel:
    """``lm`` with its ``verify_cost`` supplied by ``sane_curve`` (measured, or read from the cache, at first use).
    The function refers to ``lm`` (a cycle the garbage collector frees with it); no table of the process does."""
    lm.verify_cost = lambda: sane_curve(lm)
    return lm
