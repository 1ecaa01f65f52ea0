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
- ``runner``: warm-up and the loop over prompts and contenders;
- ``prompt_file``: reading a prompt file (no torch: `goose bench` refuses a bad file before loading anything).

Import what you use from its module: this package imports none of them, so reading a prompt file costs no
torch start-up.
"""
