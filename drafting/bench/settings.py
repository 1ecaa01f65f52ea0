"""What one bench run is asked to do, the same for every prompt and contender of the run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from drafting.engine.sampling_params import SamplingParams
from drafting.bench.identity import TIE_MARGIN


@dataclass
class BenchSettings:
    max_new_tokens: int = 128
    raw: bool = False
    params: SamplingParams = field(default_factory=SamplingParams)
    trace_dir: Path | None = None  # one step-record trace per prompt x speculator goes here when set
    tie_margin: float = TIE_MARGIN
