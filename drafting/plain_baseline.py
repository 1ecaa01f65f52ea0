"""What plain decoding (`ar`) would cost per token right now, for a live speedup figure.

One measurement at start-up is not enough: it may be taken while another process holds the cores, and a token
costs more as the context grows. Here the time per plain token is read from this process's own verify cost
curve (drafting.cost, the curve of the mode in use) at the current cache length, that is its one-row point.
That curve is the one drafting.curve_watch keeps true to this run's own one-row steps (re-measured when they
drift); when the watch finds the machine oversubscribed, ``busy`` says why, and a speedup shown then would
not be trustworthy.
"""

from __future__ import annotations

from .model import LoadedModel


class PlainBaseline:
    def __init__(self, lm: LoadedModel):
        from .budget import sane_curve

        self.lm = lm
        self.cost = sane_curve(lm)  # the shared, watched curve of this model and mode

    def _watch(self):
        from .curve_watch import watch_of

        return watch_of(self.lm.model)

    def step_s(self, prefix: int | None = None) -> float:
        """Seconds per plain decoding token after ``prefix`` cached tokens (default: the cache length of the
        latest step this process ran on the model)."""
        if prefix is None:
            w = self._watch()
            prefix = w.last_prefix if w is not None and w.last_prefix is not None else self.cost.short_prefix
        return self.cost.at(prefix).time(1)

    @property
    def busy(self) -> str | None:
        w = self._watch()
        return w.busy if w is not None else None
