"""Bench names of the baselines (``hf-ar``, ``hf-pld``, ``llama.cpp``, ``llama.cpp-pld``, ``llama.cpp-ngram``,
``llama.cpp-ngram-simple``) and the one function that builds one from a spec."""

from __future__ import annotations

from drafting.baselines.hf_generate import NAME as HF_AR, HFGenerate
from drafting.baselines.hf_pld import NAME as HF_PLD, HFPromptLookup
from drafting.baselines.llama_cpp import NAMES as LLAMA_CPP_NAMES, PLD as LLAMA_CPP_PLD, LlamaCppPldRunner
from drafting.baselines.llama_cpp_plain import LlamaCppPlainRunner
from drafting.baselines.llama_server import SPEC_TYPES as LLAMA_SERVER_ROWS, LlamaServerRunner
from drafting.baselines.protocol import Baseline
from drafting.engine.forward import TRANSFORMERS
from drafting.engine.loaded_model import LoadedModel
from drafting.engine.sampling_params import SamplingParams
from drafting.errors import SpecError

WHAT = {
    HF_AR: "transformers' own generate() on the unmodified model",
    HF_PLD: "transformers' generate(prompt_lookup_num_tokens=10)",
}
NAMES = (HF_AR, HF_PLD, *LLAMA_CPP_NAMES, *LLAMA_SERVER_ROWS)


def baseline_for(spec: str, lm: LoadedModel, params: SamplingParams) -> Baseline | None:
    """The baseline ``spec`` names, or None when it names none (a goose speculator); SpecError (one sentence)
    for options given to a baseline, or a greedy-only one asked to sample."""
    spec = spec.strip()
    name = spec.split(":")[0]
    if name not in NAMES:
        return None
    if spec != name:
        raise SpecError(f"{name!r} takes no options" + (f" (it is {WHAT[name]})." if name in WHAT else "."))
    if name in WHAT and lm.engine != TRANSFORMERS:
        raise SpecError(f"{name!r} is {WHAT[name]}, so it runs on the transformers engine only; drop it here.")
    if name == HF_AR:
        return HFGenerate(lm, params)
    if name == HF_PLD:
        return HFPromptLookup(lm, params)
    if not params.greedy:
        raise SpecError(f"{name!r} runs greedy only; drop it or use --temperature 0.")
    if name in LLAMA_SERVER_ROWS:
        return LlamaServerRunner(lm, name)
    return LlamaCppPldRunner(lm) if name == LLAMA_CPP_PLD else LlamaCppPlainRunner(lm)
