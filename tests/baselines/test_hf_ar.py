"""`hf-ar`: transformers' own generate() on a second, unmodified model instance, identical to our `ar`; and the
summary's speedups against the faster plain decoding of the run."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from support.cli import run_goose


def _run(spec, pid, tokens, wall, task="t"):
    return {"prompt_id": pid, "task": task, "speculator": spec, "new_tokens": tokens, "wall_s": wall, "steps": tokens,
            "identical_to_ar": True}


def test_speedups_are_given_against_ar_and_the_faster_plain_decoding():
    from drafting.bench.summary import summarize
    from drafting.bench.summary import plain_reference

    runs = [_run("ar", "a", 40, 4.0), _run("hf-ar", "a", 40, 2.0), _run("goose", "a", 40, 1.0),
            _run("ar", "b", 20, 2.0), _run("hf-ar", "b", 20, 1.0), _run("goose", "b", 20, 0.5)]
    assert plain_reference(runs) == "hf-ar"
    s = summarize(runs)
    assert s["goose"]["speedup"] == pytest.approx(4.0)  # vs our ar
    assert s["goose"]["speedup_vs_plain"] == pytest.approx(2.0)  # vs transformers' generate(), the faster one
    assert s["ar"]["speedup_vs_plain"] == pytest.approx(0.5) and s["hf-ar"]["speedup"] == pytest.approx(2.0)
    assert all(e["plain_reference"] == "hf-ar" for e in s.values())
    assert s["goose"]["by_task"]["t"]["speedup_vs_plain"] == pytest.approx(2.0)
    # without hf-ar (or when ar is faster) the plain reference is ar, and both speedups agree
    only_ar = [r for r in runs if r["speculator"] != "hf-ar"]
    assert plain_reference(only_ar) == "ar"
    s = summarize(only_ar)
    assert s["goose"]["speedup_vs_plain"] == s["goose"]["speedup"]
    # llama.cpp's own loop is plain decoding too: where it is the fastest, speedups are against it
    with_llama = only_ar + [_run("llama.cpp", "a", 40, 2.0), _run("llama.cpp", "b", 20, 1.0)]
    assert plain_reference(with_llama) == "llama.cpp"
    assert summarize(with_llama)["goose"]["speedup_vs_plain"] == pytest.approx(2.0)


def test_hf_ar_runs_an_unmodified_instance_and_matches_ar(tiny_lm, tmp_path):
    from drafting.engine.decode import Decoder
    from drafting.baselines.hf_generate import HFGenerate, plain_model
    from drafting.speculators import create
    from drafting.weights.formats import apply_format

    import copy

    folder = tmp_path / "tiny"
    tiny_lm.model.save_pretrained(folder)
    ours = copy.deepcopy(tiny_lm.model)
    lm = replace(tiny_lm, model=apply_format(ours, "onednn"), name=str(folder), weights="onednn", eos_ids=set())
    hf = HFGenerate(lm)
    assert hf.model is not lm.model and hf.model is plain_model(lm)  # one shared unmodified instance
    assert hf.model.config._attn_implementation == "sdpa"  # transformers' own attention, not goose's
    assert all(type(m).__name__ != "OneDNNLinear" for m in hf.model.modules())
    for prompt in ([5, 17, 33, 2, 90, 41], [7, 7, 7, 8, 9, 10, 11, 7, 7]):
        got = hf.generate(prompt, 20)
        want = Decoder(lm, create("ar")).generate(prompt, 20)
        assert got.output_ids == want.output_ids and got.stop_reason == want.stop_reason == "max_new_tokens"
    # the same EOS rule: generation stops on (and keeps) the first EOS token
    first = hf.generate([5, 17, 33], 20).output_ids
    eos_lm = replace(lm, eos_ids={first[3]})
    cut = HFGenerate(eos_lm).generate([5, 17, 33], 20)
    assert cut.output_ids == first[: first.index(first[3]) + 1] and cut.stop_reason == "eos"


@pytest.mark.parametrize("fmt", ["float", "dual"])
def test_hf_ar_runs_on_the_very_tensors_of_a_model_that_keeps_them_plain(tiny_lm, tmp_path, fmt):
    from drafting.engine.decode import Decoder
    from drafting.baselines.hf_generate import HFGenerate
    from drafting.speculators import create
    from drafting.engine.hf.attention import use_grouped_attention
    from drafting.weights.base import LinearStandIn
    from drafting.weights.formats import apply_format

    import copy

    folder = tmp_path / "tiny"
    tiny_lm.model.save_pretrained(folder)
    ours = apply_format(copy.deepcopy(tiny_lm.model), fmt)
    use_grouped_attention(ours)
    lm = replace(tiny_lm, model=ours, name=str(folder), weights=fmt, eos_ids=set())
    hf = HFGenerate(lm)
    assert hf.model is not lm.model and hf.model.config._attn_implementation == "sdpa"
    storage = {t.untyped_storage().data_ptr() for t in [*ours.parameters(), *ours.buffers()]
               if t.layout == torch.strided}  # a packed oneDNN weight has no storage to compare
    theirs = [*hf.model.parameters(), *hf.model.buffers()]
    assert theirs and all(t.untyped_storage().data_ptr() in storage for t in theirs)  # no second copy
    assert not any(isinstance(m, LinearStandIn) for m in hf.model.modules())  # transformers' own layers
    for prompt in ([5, 17, 33, 2, 90, 41], [7, 7, 7, 8, 9, 10, 11, 7, 7]):
        got = hf.generate(prompt, 20)
        want = Decoder(lm, create("ar")).generate(prompt, 20)
        assert got.output_ids == want.output_ids


@pytest.mark.slow
def test_bench_hf_ar_rows_are_identical_and_summarised(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": "p1", "task": "code", "prompt": "Rewrite this: def add(a, b): return a + b"}) + "\n")
    out = tmp_path / "b.json"
    proc = run_goose("bench", str(path), "-s", "hf-ar,pld,hf-pld", "-n", "16", "--dtype", "float32", "--json", str(out),
                     timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    runs = {r["speculator"]: r for r in doc["runs"]}
    assert runs["hf-ar"]["identical_to_ar"] is True and runs["hf-ar"]["new_tokens"] == runs["ar"]["new_tokens"]
    assert runs["hf-ar"]["forward_passes"] > 0 and runs["hf-ar"]["prefill_s"] > 0  # its own instance is timed too
    assert runs["hf-pld"]["identical_to_ar"] is True
    summary = doc["summary"]
    assert summary["pld"]["plain_reference"] in ("ar", "hf-ar")
    assert summary["pld"]["speedup_vs_plain"] is not None and summary["hf-ar"]["identical"] == 1
    assert "vs fastest plain" in proc.stdout
    assert doc["openmp"] and (doc["weights_choice"] is None or doc["weights_choice"]["dtype"] == "float32")
