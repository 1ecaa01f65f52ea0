"""What runs in a bench: `ar` first (the reference), then each distinct spec once; our own speculators behind a
Decoder, transformers' own plain decoding (`hf-ar`) and prompt lookup (`hf-pld`) on the unmodified model, and
llama.cpp as external rows beside them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from drafting.engine.acceptance import make_acceptor
from drafting.engine.decode import Decoder, GenerationResult
from drafting.baselines.hf_generate import NAME as HF_AR, HFGenerate
from drafting.baselines.hf_pld import NAME as HF_PLD, HFPromptLookup
from drafting.baselines.llama_cpp import NAMES as LLAMA_CPP_NAMES, PLD as LLAMA_CPP_PLD, LlamaCppRunner
from drafting.engine.loaded_model import LoadedModel
from drafting.engine.sampling import SamplingParams
from drafting.errors import SpecError
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
        if spec.strip() == HF_PLD:
            contender = Contender(hf=HFPromptLookup(lm, params))
        elif spec.strip() == HF_AR:
            contender = Contender(hf=HFGenerate(lm, params))
        elif spec.strip().split(":")[0] == HF_PLD:
            raise SpecError(f"{HF_PLD!r} takes no options (it is transformers' generate(prompt_lookup_num_tokens=10)).")
        elif spec.strip().split(":")[0] == HF_AR:
            raise SpecError(f"{HF_AR!r} takes no options (it is transformers' own generate() on the unmodified model).")
        elif spec.strip() in LLAMA_CPP_NAMES:
            if not params.greedy:
                raise SpecError(f"{spec.strip()!r} runs greedy only; drop it or use --temperature 0.")
            contender = Contender(external=LlamaCppRunner(lm, pld=spec.strip() == LLAMA_CPP_PLD))
        elif spec.strip().split(":")[0] in LLAMA_CPP_NAMES:
            raise SpecError(f"{spec.strip().split(':')[0]!r} takes no options.")
        else:
            speculator = create(spec)
            margins = params.greedy and speculator.name == REFERENCE  # the tie test reads ar's top-2 margins
            contender = Contender(decoder=Decoder(lm, speculator, acceptor=make_acceptor(params), record_margins=margins))
        if contender.spec not in seen:
            seen.add(contender.spec)
            out.append(contender)
    return out


@dataclass
class Contender:
    """One entry of the comparison: a Decoder around ONE speculator instance for the whole run, or a transformers
    row (hf-ar, hf-pld: their own loop on the unmodified model), or an external engine."""

    decoder: Decoder | None = None
    hf: HFGenerate | HFPromptLookup | None = None
    external: LlamaCppRunner | None = None  # another engine: timed beside ours, never compared token by token

    @property
    def spec(self) -> str:
        return self.decoder.speculator.spec() if self.decoder else (self.hf or self.external).spec()

    def stats(self) -> dict:
        return flatten(self.decoder.speculator.stats() if self.decoder else (self.hf or self.external).stats())

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> GenerationResult:
        if self.decoder:
            return self.decoder.generate(prompt_ids, max_new_tokens)
        return (self.hf or self.external).generate(prompt_ids, max_new_tokens)


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
