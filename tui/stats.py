"""Running numbers of one answer: speed, speedup over plain decoding, acceptance by source."""

from __future__ import annotations

from collections import deque

from rich.text import Text

from drafting.trace import StepRecord

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

    def add(self, record: StepRecord, elapsed: float) -> None:
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

    def speedup(self, ar_step_s: float | None) -> float | None:
        """Plain decoding would take ar_step_s per token; how much faster this answer went."""
        if not ar_step_s or self.elapsed <= 0:
            return None
        return self.tokens * ar_step_s / self.elapsed

    def sparkline(self, cells: int) -> str:
        """Tokens per step of the latest steps, one block character each (full block = the most so far)."""
        recent = list(self.per_step)[-cells:]
        top = max(recent, default=1)
        return "".join(BLOCKS[min(len(BLOCKS) - 1, round((len(BLOCKS) - 1) * n / top))] for n in recent)

    def render(self, ar_step_s: float | None, spark_cells: int = 60) -> Text:
        out = Text(no_wrap=True, overflow="ellipsis")
        out.append(f"{self.tokens_per_s:5.1f} tok/s", style="bold")
        up = self.speedup(ar_step_s)
        if up is None:
            out.append(" · speedup: measuring plain decoding…" if ar_step_s is None else "")
        else:
            out.append(" · ")
            out.append(f"{up:.2f}×", style="bold green" if up >= 1 else "bold red")
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
