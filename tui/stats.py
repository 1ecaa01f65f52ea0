"""Running numbers of one answer: speed, speedup over plain decoding, acceptance by source.

Given a ``drafting.machine.plain_speed.PlainBaseline``, the speedup compares this answer's decoding time with what
plain decoding would have taken for the same tokens at the same context lengths (this process's own cost curve,
kept true to the run), and shows "machine busy" instead when other processes held the cores meanwhile."""

from __future__ import annotations

from collections import deque

from rich.text import Text

from drafting.machine.load import LoadMeter
from drafting.engine.trace import StepRecord

SPARK_STEPS = 200
BLOCKS = "▁▂▃▄▅▆▇█"


class LiveStats:
    def __init__(self):
        self.tokens = 0
        self.steps = 0
        self.elapsed = 0.0  # decoding seconds (prefill excluded), as the decoder measured them
        self.draft_s = 0.0
        self.verify_s = 0.0
        self.offered: dict[str, int] = {}
        self.accepted: dict[str, int] = {}
        self.per_step: deque[int] = deque(maxlen=SPARK_STEPS)
        self.plain_s = 0.0  # what plain decoding would have taken for these tokens (with a baseline)
        self.meter: LoadMeter | None = None

    def add(self, record: StepRecord, elapsed: float, baseline=None) -> None:
        if self.meter is None:
            self.meter = LoadMeter().start()
        if baseline is not None:
            self.plain_s += len(record.emitted) * baseline.step_s()
        self.tokens += len(record.emitted)
        self.steps += 1
        self.elapsed = elapsed
        self.draft_s += record.draft_s
        self.verify_s += record.verify_s
        for src in record.sources[1:]:
            self.offered[src] = self.offered.get(src, 0) + 1
        for node in record.accepted[1:]:
            src = record.sources[node]
            self.accepted[src] = self.accepted.get(src, 0) + 1
        self.per_step.append(len(record.emitted))

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def mean_accepted(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    def speedup(self, ar_step_s: float | None, baseline=None) -> float | None:
        """How much faster this answer went than plain decoding: from the baseline's per-step figures, or, without
        one, at ``ar_step_s`` per token."""
        if self.elapsed <= 0:
            return None
        if baseline is not None and self.plain_s > 0:
            return self.plain_s / self.elapsed
        if not ar_step_s:
            return None
        return self.tokens * ar_step_s / self.elapsed

    def busy(self, baseline=None) -> str | None:
        """Why a speedup would not be trustworthy now (other processes held the cores), or None."""
        if baseline is None:  # a fixed figure given by the caller: nothing measured here to distrust
            return None
        if baseline.busy:
            return baseline.busy
        load = self.meter.stop() if self.meter is not None else None
        return load.describe() if load is not None and load.busy else None

    def speed_text(self, ar_step_s: float | None, baseline=None) -> str:
        """`` · 1.52× vs ar (41 ms/token ...)``, `` · machine busy (...)`` or '' (plain text, for one-line summaries)."""
        busy = self.busy(baseline)
        if busy:
            return f" · machine busy ({busy}): no speedup shown"
        up = self.speedup(ar_step_s, baseline)
        if up is None:
            return ""
        if baseline is not None and self.tokens:
            return f" · {up:.2f}× vs ar ({self.plain_s / self.tokens * 1e3:.0f} ms/token from this run's cost curve)"
        return f" · {up:.2f}× vs ar ({ar_step_s * 1e3:.0f} ms/token measured at start)"

    def sparkline(self, cells: int) -> str:
        """Tokens per step of the latest steps, one block character each (full block = the most so far)."""
        recent = list(self.per_step)[-cells:]
        top = max(recent, default=1)
        return "".join(BLOCKS[min(len(BLOCKS) - 1, round((len(BLOCKS) - 1) * n / top))] for n in recent)

    def render(self, ar_step_s: float | None, spark_cells: int = 60, baseline=None) -> Text:
        out = Text(no_wrap=True, overflow="ellipsis")
        out.append(f"{self.tokens_per_s:5.1f} tok/s", style="bold")
        up = self.speedup(ar_step_s, baseline)
        busy = self.busy(baseline)
        if busy:
            out.append(" · ")
            out.append("machine busy", style="bold yellow")
            out.append(f" ({busy}): no speedup shown", style="grey70")
        elif up is None:
            out.append(" · speedup: measuring plain decoding…" if ar_step_s is None and baseline is None else "")
        else:
            out.append(" · ")
            out.append(f"{up:.2f}×", style="bold green" if up >= 1 else "bold red")
            if baseline is not None and self.tokens:
                out.append(f" vs ar ({self.plain_s / self.tokens * 1e3:.0f} ms/token at this context, this run's cost curve)",
                           style="grey70")
            else:
                out.append(f" vs ar ({ar_step_s * 1e3:.0f} ms/token measured at start)", style="grey70")
        out.append(f" · {self.mean_accepted:.2f} tok/step · {self.tokens} tok in {self.steps} steps\n")
        total = self.draft_s + self.verify_s
        share = self.draft_s / total if total else 0.0
        out.append(f"draft {self.draft_s * 1e3:.0f} ms / verify {self.verify_s * 1e3:.0f} ms ({share:.0%} drafting)")
        for src in sorted(self.offered, key=lambda s: -self.offered[s]):
            got, offered = self.accepted.get(src, 0), self.offered[src]
            out.append(f" · {src} {got}/{offered} {got / offered:.0%}", style="grey70")
        out.append("\ntokens per step ", style="grey70")
        out.append(self.sparkline(spark_cells), style="green")
        return out
