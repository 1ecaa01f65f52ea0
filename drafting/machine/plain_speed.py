"""What plain decoding (`ar`) would cost per token right now, for a live speedup figure.

One measurement at start-up is not enough: it may be taken while another process holds the cores, and a token
costs more as the context grows. Here the time per plain token is the one-row point of this process's own cost
curve (drafting.machine.cost_curve, the mode in use) at the current cache length: the budgets' shared curve where a speculator
already holds one, else one-row forwards timed now at a short and a long cache length. Either is watched by
drafting.machine.curve_watch against this run's own one-row steps (measured again when they drift); when the watch
finds the machine oversubscribed, ``busy`` says why, and a speedup shown then would not be trustworthy.
"""

from __future__ import annotations

from drafting.engine.loaded_model import LoadedModel
from drafting.machine.cost_curve import at_two_lengths, measure
from drafting.machine.curve_watch import CurveWatch, detached, listen, watch_of


class PlainBaseline:
    def __init__(self, lm: LoadedModel):
        self.lm = lm
        shared = watch_of(lm.model)
        if shared is not None:
            self.watch = shared
        else:  # the watch is kept in a table of the process: its rebuild must not hold the model
            self.watch = listen(lm.model, CurveWatch(_one_row_cost(lm), detached(lm, _one_row_cost)))
        self.cost = self.watch.cost

    def step_s(self, prefix: int | None = None) -> float:
        """Seconds per plain decoding token after ``prefix`` cached tokens (default: the cache length of the
        latest step this process ran on the model)."""
        if prefix is None:
            last = self.watch.last_prefix
            prefix = last if last is not None else self.cost.short_prefix
        return self.cost.one_row(prefix)

    @property
    def busy(self) -> str | None:
        return self.watch.busy


def _one_row_cost(lm: LoadedModel):
    return at_two_lengths(lm, lambda prefix: measure(lm, sizes=(1,), prefix=prefix))
