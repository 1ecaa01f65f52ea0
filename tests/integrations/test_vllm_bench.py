"""vllm_bench: its method names, comparisons and summary (always), and GooseProposer inside a real vLLM engine
against vLLM without speculation (only where vLLM is importable: run it with .venv-vllm/bin/python)."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from scripts.vllm_bench import (BenchError, bench, check_model_folder, compare_with_reference, first_divergence,
                                main, parse_args, parse_concurrency, summarize)
from scripts.vllm_runs import MethodError, method_config

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_method_names_map_to_vllm_configs():
    assert method_config("none", 8) is None
    assert method_config("ngram", 8) == {"method": "ngram", "num_speculative_tokens": 8}
    assert method_config("ngram:5", 8)["prompt_lookup_min"] == 2
    assert method_config("ngram:3-4", 8)["prompt_lookup_max"] == 4
    assert method_config("ngram:1", 8)["prompt_lookup_min"] == 1
    assert method_config("goose", 6)["model"] == "drafting.integrations.vllm.GooseProposer"
    assert method_config("suffix", 8)["method"] == "suffix"
    assert method_config("goose:spine=full", 8)["model"].endswith("GooseProposer")
    for bad in ("eagle", "ngram:x", "ngram:5-2", "ngram:0", "goose:spine=tree"):
        with pytest.raises(MethodError):
            method_config(bad, 8)


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


def test_summary_counts_identical_and_acceptance_length_per_concurrency():
    runs = [
        {"method": "none", "concurrency": 1, "new_tokens": 10, "tpot_s": [0.2], "identical": True},
        {"method": "none", "concurrency": 1, "new_tokens": 10, "tpot_s": [0.2], "identical": True},
        {"method": "goose", "concurrency": 1, "new_tokens": 10, "tpot_s": [0.1, 0.05], "identical": True},
        {"method": "goose", "concurrency": 1, "new_tokens": 10, "tpot_s": [0.15], "identical": False},
        {"method": "none", "concurrency": 4, "new_tokens": 10, "tpot_s": [0.3], "identical": True},
        {"method": "none", "concurrency": 4, "new_tokens": 10, "tpot_s": [0.3], "identical": False},
        {"method": "goose", "concurrency": 4, "new_tokens": 10, "tpot_s": [], "identical": True},
        {"method": "goose", "concurrency": 4, "new_tokens": 10, "tpot_s": [0.4], "identical": True},
    ]
    loads = [
        {"method": "none", "concurrency": 1, "wall_s": 4.0, "new_tokens": 20, "drafts": 0, "accepted": 0},
        {"method": "goose", "concurrency": 1, "wall_s": 2.0, "new_tokens": 20, "drafts": 4, "accepted": 6},
        {"method": "none", "concurrency": 4, "wall_s": 2.0, "new_tokens": 20, "drafts": 0, "accepted": 0},
        {"method": "goose", "concurrency": 4, "wall_s": 2.5, "new_tokens": 20, "drafts": 2, "accepted": 1},
    ]
    s = summarize(runs, loads, ["none", "goose"])
    assert s["none"]["tokens_per_s"] == 5.0 and s["none"]["mean_acceptance_length"] is None
    one = {"tokens_per_s": 10.0, "mean_acceptance_length": 2.5, "identical": 1, "prompts": 2, "speedup": 2.0}
    assert s["goose"] == {**s["goose"], **one}  # concurrency 1, as before
    assert s["goose"]["mean_tpot_s"] == pytest.approx(0.1)
    four = s["goose"]["by_concurrency"]["4"]
    assert four == {**four, "tokens_per_s": 8.0, "mean_acceptance_length": 1.5, "identical": 2, "prompts": 2,
                    "speedup": 0.8, "mean_tpot_s": 0.4}
    assert s["goose"]["by_concurrency"]["1"] == {k: v for k, v in s["goose"].items() if k != "by_concurrency"}
    assert s["none"]["by_concurrency"]["4"]["identical"] == 1
    assert parse_concurrency("1,4,16") == [1, 4, 16] and parse_concurrency("4,4") == [4]
    assert list(summarize(runs, loads[::-1], ["none", "goose"])["goose"]["by_concurrency"]) == ["1", "4"]


def test_outputs_are_compared_with_no_speculation_at_the_lowest_concurrency_run():
    runs = [{"method": "none", "concurrency": 16, "id": "a", "output_ids": [1, 2, 4]},
            {"method": "goose", "concurrency": 16, "id": "a", "output_ids": [1, 2, 4]}]
    compare_with_reference(runs)
    assert all(r["identical"] for r in runs)
    runs.append({"method": "none", "concurrency": 1, "id": "a", "output_ids": [1, 2, 3]})
    compare_with_reference(runs)  # one request at a time has run: it is the reference now
    assert [r["first_divergence"] for r in runs] == [2, 2, None]
    for bad in ("0", "x", "", "1,-2"):
        with pytest.raises(BenchError, match="--concurrency"):
            parse_concurrency(bad)


def test_a_folder_vllm_cannot_read_is_refused_in_one_sentence(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": None}))
    with pytest.raises(BenchError, match="architectures"):
        check_model_folder(str(tmp_path))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "hi"}) + "\n")
    assert main([str(prompts), "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert main([str(prompts), "--model", str(tmp_path), "--methods", "none,eagle"]) == 2
    assert main([str(tmp_path / "missing.jsonl")]) == 2
    assert main([str(prompts), "--concurrency", "1,zero"]) == 2
    if not HAS_VLLM:
        capsys.readouterr()
        assert main([str(prompts)]) == 2
        assert "make vllm-setup" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed here (make vllm-setup; run with .venv-vllm/bin/python)")
def test_goose_proposer_in_vllm_is_lossless_and_drafts(tmp_path):
    prompts = tmp_path / "p.jsonl"
    lines = [
        {"id": "code", "prompt": "Write a Python function is_even(n), then write is_odd(n) the same way."},
        {"id": "list", "prompt": "List the numbers from one to twelve in words, one per line."},
        {"id": "chat", "prompt": "Name a colour.", "turns": ["Name a colour.", "Now name it again, in capitals."]},
    ]
    prompts.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "r.json"
    args = ["--methods", "none,goose", "--max-new-tokens", "40", "--json", str(out), "--max-model-len", "1024"]
    if os.environ.get("GOOSE_VLLM_MODEL"):
        args += ["--model", os.environ["GOOSE_VLLM_MODEL"]]
    result = bench(parse_args([str(prompts)] + args))
    assert json.loads(out.read_text())["summary"].keys() == {"none", "goose"}
    runs = {(r["method"], r["id"]): r for r in result["runs"]}
    for x in lines:
        plain, goose = runs[("none", x["id"])], runs[("goose", x["id"])]
        assert plain["new_tokens"] > 0
        assert len(set(plain["output_ids"])) > 3  # a model read wrongly repeats one token
        assert goose["output_ids"] == plain["output_ids"]
    s = result["summary"]["goose"]
    assert s["identical"] == s["prompts"] == 3
    assert s["mean_acceptance_length"] is not None and s["mean_acceptance_length"] > 1.0


def test_goose_bench_reference_comparison(tmp_path):
    from scripts.goose_reference import GooseReferenceError, compare, eos_ids, load

    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 2}))
    assert eos_ids(str(tmp_path)) == {2}
    goose = [
        {"prompt_id": "a", "speculator": "ar", "output_ids": [5, 6, 7], "new_tokens": 3, "wall_s": 1.0},
        {"prompt_id": "b", "speculator": "ar", "output_ids": [5, 6, 7], "new_tokens": 3, "wall_s": 1.0,
         "margins": [3.0, 0.01, 2.0]},
        {"prompt_id": "a", "speculator": "goose", "output_ids": [5, 6, 7], "new_tokens": 3, "wall_s": 0.5},
    ]
    vllm_none = [{"id": "a", "output_ids": [5, 6, 7, 2]},  # vLLM keeps the EOS it stopped on
                 {"id": "b", "output_ids": [5, 9, 7]},
                 {"id": "c", "output_ids": [1]}]
    got = compare(vllm_none, goose, {2})
    assert (got["identical"], got["prompts"]) == (1, 2)
    b = got["none_vs_goose_ar"][1]
    assert (b["first_divergence"], b["goose_margin"], b["length_only"]) == (1, 0.01, False)
    short = compare([{"id": "a", "output_ids": [5, 6]}], goose, {2})["none_vs_goose_ar"][0]
    assert (short["first_divergence"], short["length_only"], short["goose_margin"]) == (2, True, None)
    assert got["goose_bench"]["ar"] == {"tokens_per_s": 3.0, "prompts": 2}
    assert got["goose_bench"]["goose"]["tokens_per_s"] == 6.0
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"runs": goose}))
    assert load(str(path)) == goose
    path.write_text(json.dumps({"runs": []}))
    with pytest.raises(GooseReferenceError, match="ar runs"):
        load(str(path))


@pytest.mark.slow
@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed here (make vllm-setup; run with .venv-vllm/bin/python)")
def test_goose_proposer_traces_of_a_real_vllm_run_add_up_to_its_accepted_tokens(tmp_path):
    """trace=DIR inside a real engine: one trace per request (the bench's warm-up request first), each readable by
    goose viz; their accepted drafts add up to vLLM's own counter, less at most k per request (a request's last
    proposal is verified after the proposer last sees it, so its verdict is not in the trace)."""
    from drafting.engine.trace import read_trace

    prompts = tmp_path / "p.jsonl"
    lines = [{"id": "list", "prompt": "List the numbers from one to twelve in words, one per line."},
             {"id": "code", "prompt": "Write a Python function is_even(n), then write is_odd(n) the same way."}]
    prompts.write_text("".join(json.dumps(x) + "\n" for x in lines))
    traces = tmp_path / "traces"
    result = bench(parse_args([str(prompts), "--methods", f"goose:trace={traces}", "--max-new-tokens", "48",
                               "--max-model-len", "1024"]))
    files = sorted(traces.glob("*.jsonl"))
    assert len(files) == 1 + len(lines)  # the warm-up request, then the prompts
    records = [r for f in files[1:] for r in read_trace(f).records]
    accepted = sum(len(r.accepted) - 1 for r in records)
    load = next(x for x in result["loads"] if x["method"].startswith("goose"))
    assert load["accepted"] > 0
    assert load["accepted"] - result["num_speculative_tokens"] * len(lines) <= accepted <= load["accepted"]
