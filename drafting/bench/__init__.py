"""Side-by-side benchmarks: every speculator on every prompt, in turn, against plain decoding (`ar`).

The runner yields one result dict per prompt x speculator as soon as it finishes (the caller saves it), so an
interrupted run loses nothing and a resumed one skips what is done. ``summarize`` turns result dicts into the
per-speculator and per-task summary; it knows nothing about any particular speculator.

One idea per module:
- ``contenders``: what runs (spec parsing, our decoders, hf-pld and the llama.cpp rows);
- ``timing``: forward-pass timing hooks;
- ``settings``: what a bench run is asked to do (tokens, sampling, traces, tie margin);
- ``one_prompt``: how one prompt (all its turns) is run with one contender, and the run dict it gives;
- ``identity``: whether a run's output is identical to `ar`'s, or identical up to near-ties;
- ``traces``: the step-record trace file of one run;
- ``summary``: what is aggregated over records and runs;
- ``results``: the results file, resume, and skipped prompts;
- ``runner``: warm-up and the loop over prompts and contenders.
"""

from drafting.bench.contenders import REFERENCE, Contender, build_contenders, split_specs
from drafting.bench.identity import TIE_MARGIN, first_divergence, tie_check
from drafting.bench.one_prompt import run_one
from drafting.bench.results import BenchError, ResultsFile, Skip
from drafting.bench.runner import prompt_fits, run_bench, warm_up
from drafting.bench.settings import BenchSettings
from drafting.bench.summary import aggregate_info, summarize
from drafting.bench.timing import ForwardTimer
from drafting.bench.traces import trace_path, write_trace

__all__ = [
    "REFERENCE", "TIE_MARGIN", "BenchError", "BenchSettings", "Contender", "ForwardTimer", "ResultsFile", "Skip",
    "aggregate_info", "build_contenders", "first_divergence", "prompt_fits", "run_bench", "run_one",
    "split_specs", "summarize", "tie_check", "trace_path", "warm_up", "write_trace",
]
