"""What runs in a bench: `ar` first (the reference), then each distinct spec once; our own speculators behind a
Decoder, transformers' own plain decoding (`hf-ar`) and prompt lookup (`hf-pld`) on the unmodified model, and
llama.cpp as external rows beside them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from drafting.baselines.protocol import Baseline
from drafting.baselines.registry import baseline_for
from drafting.engine.acceptance import make_acceptor
from drafting.engine.decode import Decoder, GenerationResult
from drafting.engine.hooks import RecordMargins
from drafting.engine.loaded_model import LoadedModel
from drafting.engine.sampling_params import SamplingParams
from drafting.machine.step_hooks import machine_hooks
from drafting.speculators import create

REFERENCE = "ar"


def split_specs(text: str) -> list[str]:
    """Split ``ar,pld:max_ngram=3,draft=10,goose:budget=60`` into specs.

    Specs contain commas themselves, so a comma starts a new spec only where what follows is not a
    ``key=value`` option (a name alone, or a name followed by ``:``).
    """
    specs: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        eq, colon = part.find("="), part.find(":")
        starts_spec = eq < 0 or (0 <= colon < eq)
        if starts_spec or not specs:
            specs.append(part)
        else:
            specs[-1] += "," + part
    return specs


def build_contenders(text: str, lm: LoadedModel, params: SamplingParams) -> list["Contender"]:
    """`ar` first (the reference), then each distinct spec once; raises SpecError for a bad spec."""
    specs = [REFERENCE] + split_specs(text)
    out: list[Contender] = []
    seen: set[str] = set()
    for spec in specs:
        baseline = baseline_for(spec, lm, params)
        if baseline is not None:
            contender = Contender(baseline=baseline)
        else:
            speculator = create(spec)
            hooks = machine_hooks()
            if params.greedy and speculator.name == REFERENCE:
                hooks.append(RecordMargins())  # the tie test reads ar's top-2 margins
            contender = Contender(decoder=Decoder(lm, speculator, acceptor=make_acceptor(params), hooks=hooks))
        if contender.spec not in seen:
            seen.add(contender.spec)
            out.append(contender)
    return out


@dataclass
class Contender:
    """One entry of the comparison: a Decoder around ONE speculator instance for the whole run, or a baseline
    (transformers' own loop on the unmodified model, or another engine)."""

    decoder: Decoder | None = None
    baseline: Baseline | None = None

    @property
    def external(self) -> bool:
        return self.baseline is not None and self.baseline.external

    @property
    def device(self) -> str | None:
        """Where a baseline runs when it says so (a llama.cpp row on the CPU beside goose's model on a GPU, where
        llama.cpp was built without GPU support); None: where goose's model is."""
        return getattr(self.baseline, "device", None) if self.baseline is not None else None

    @property
    def spec(self) -> str:
        return self.decoder.speculator.spec() if self.decoder else self.baseline.spec()

    def stats(self) -> dict:
        return flatten(self.decoder.speculator.stats() if self.decoder else self.baseline.stats())

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> GenerationResult:
        if self.decoder:
            return self.decoder.generate(prompt_ids, max_new_tokens)
        return self.baseline.generate(prompt_ids, max_new_tokens)


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def flatten(d: dict, prefix: str = "") -> dict[str, float]:
    """A contender's nested ``stats()`` as ``{"a.b": number}``, so counters can be subtracted per run."""
    out: dict[str, float] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        elif is_number(v):
            out[f"{prefix}{k}"] = v
    return out
