"""A flat verify cost, the same on every machine, for tests whose subject is what a speculator drafts rather than how
much this machine's measured curve lets it draft: a steep curve measured beside another test leaves priced
speculators drafting too little to prove deep acceptance (and a GPU's curve is flat)."""

from drafting.machine.cost_curve import CostCurve, PrefixCost

FLAT = PrefixCost(CostCurve(sizes=[1, 2, 4, 8, 16, 32, 64, 128],
                            seconds=[0.0050, 0.0050, 0.0050, 0.0051, 0.0052, 0.0055, 0.0060, 0.0080]))


def priced_flat(lm):
    """``lm`` whose tree budgets read ``FLAT`` instead of the curve measured for it on this machine."""
    from dataclasses import replace

    return replace(lm, verify_cost=lambda: FLAT)
