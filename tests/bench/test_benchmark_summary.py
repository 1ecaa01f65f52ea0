"""The bench's algorithm-free parts: spec splitting, per-source counts, generic info aggregation, summary maths."""

import pytest

from drafting.bench.contenders import split_specs
from drafting.bench.identity import first_divergence
from drafting.bench.summary import aggregate_info, summarize
from drafting.engine.trace import source_counts
from drafting.engine.trace import StepRecord


def test_split_specs_keeps_option_commas():
    assert split_specs("ar,pld,hf-pld") == ["ar", "pld", "hf-pld"]
    assert split_specs("pld:max_ngram=3,draft=10,goose:budget=60,hf-pld") == [
        "pld:max_ngram=3,draft=10", "goose:budget=60", "hf-pld"]
    assert split_specs(" pld:gate=off , nosuch ") == ["pld:gate=off", "nosuch"]
    assert split_specs("") == []


def rec(tokens_sources, accepted, info):
    return StepRecord(step=0, position=0, tokens=[0] * len(tokens_sources), parents=[-1] + [0] * (len(tokens_sources) - 1),
                      sources=tokens_sources, accepted=accepted, emitted=[1] * len(accepted), draft_s=0, verify_s=0,
                      info=info)


def test_sources_and_info_are_aggregated_without_knowing_the_speculator():
    records = [
        rec(["root", "spine", "spine", "adjacency"], [0, 1, 2], {"route": "spine", "budget": 60, "ema": 0.5, "bypass": True}),
        rec(["root", "adjacency", "root-alt"], [0, 2], {"route": "bypass", "budget": 40, "ema": 0.7, "bypass": False}),
        rec(["root"], [0], {"route": "spine", "confidence": 0.9, "ema": 0.6, "rows_seen": [1, 2]}),
    ]
    src = source_counts(records)
    assert src == {"spine": {"offered": 2, "accepted": 2}, "adjacency": {"offered": 2, "accepted": 0},
                   "root-alt": {"offered": 1, "accepted": 1}}
    info = aggregate_info(records)
    assert info["route"]["counts"] == {"spine": 2, "bypass": 1}
    assert info["budget"] == {"n": 2, "sum": 100.0, "mean": 50.0}
    assert info["confidence"]["mean"] == pytest.approx(0.9)
    assert info["bypass"]["counts"] == {"true": 1, "false": 1}
    assert info["ema"]["trajectory"] == [0.5, 0.7, 0.6]
    assert "rows_seen" not in info  # lists are not summarised


def run(pid, task, spec, tokens, wall, steps, same=True, **extra):
    return {"prompt_id": pid, "task": task, "speculator": spec, "new_tokens": tokens, "wall_s": wall, "steps": steps,
            "identical_to_ar": same, "first_divergence": None if same else 3, **extra}


def test_summary_speedup_is_ratio_of_total_throughputs():
    runs = [
        run("a", "code", "ar", 10, 1.0, 10), run("a", "code", "pld", 10, 0.5, 4,
            sources={"context": {"offered": 8, "accepted": 6}}, info={"route": {"counts": {"chain": 4}}},
            stats={"offered": 8}),
        run("b", "chat", "ar", 30, 3.0, 30), run("b", "chat", "pld", 30, 2.0, 20, same=False,
            sources={"context": {"offered": 2, "accepted": 1}}, stats={"offered": 2}),
    ]
    s = summarize(runs)
    assert list(s) == ["ar", "pld"]
    assert s["ar"]["speedup"] == pytest.approx(1.0)
    assert s["pld"]["tokens_per_s"] == pytest.approx(40 / 2.5)
    assert s["pld"]["speedup"] == pytest.approx((40 / 2.5) / (40 / 4.0))
    assert s["pld"]["mean_accepted"] == pytest.approx(40 / 24)
    assert s["pld"]["identical"] == 1 and s["pld"]["prompts"] == 2
    assert s["pld"]["by_task"]["code"]["speedup"] == pytest.approx(2.0)
    assert s["pld"]["by_task"]["chat"]["identical"] == 0
    d = s["pld"]["details"]
    assert d["sources"]["context"] == {"offered": 10, "accepted": 7, "rate": 0.7}
    assert d["info"]["route"]["counts"] == {"chain": 4}
    assert d["stats"] == {"offered": 10}
    assert summarize(runs, greedy=False)["pld"]["identical"] is None


def test_each_row_says_where_it_ran():
    """A llama.cpp row built without GPU support runs on the CPU beside goose on a GPU: the table says so."""
    from rich.console import Console

    from goosecli.bench_report import Report

    runs = [run("a", "code", "ar", 10, 1.0, 10, device="cuda"),
            run("a", "code", "llama.cpp", 10, 2.0, 10, same=None, device="cpu", external=True),
            run("a", "code", "pld", 10, 0.5, 4)]  # a file written before rows said where: the model's device
    s = summarize(runs)
    assert [s[k]["device"] for k in ("ar", "llama.cpp", "pld")] == ["cuda", "cpu", None]
    console = Console(record=True, width=200)
    console.print(Report("m", list(s), greedy=True)._main_table(s, "t", "cuda"))
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in console.export_text().splitlines()
            if line.count("│") > 3 and "speculator" not in line}
    assert rows == {"ar": "cuda", "llama.cpp": "cpu", "pld": "cuda"}


def test_a_row_timed_outside_goose_has_no_forward_or_overhead_figures():
    """llama.cpp's own loop reports no forward passes: its details say "-", not its wall time as one pass."""
    from rich.console import Console

    from goosecli.bench_report import Report

    runs = [run("a", "code", "ar", 10, 1.0, 10, forward_passes=11, forward_s=0.9, overhead_s=0.05),
            run("a", "code", "llama.cpp", 10, 2.0, 10, same=None, external=True, forward_passes=0, forward_s=2.0,
                overhead_s=0.0)]
    s = summarize(runs)
    assert s["ar"]["details"]["forward_per_step_ms"] == pytest.approx(1000 * 0.9 / 11)
    assert s["llama.cpp"]["details"]["forward_per_step_ms"] is None
    assert s["llama.cpp"]["details"]["overhead_per_step_ms"] is None
    console = Console(record=True, width=200)
    console.print(Report("m", list(s), greedy=True)._details_table(s))
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:4]]
            for line in console.export_text().splitlines() if line.count("│") > 3 and "speculator" not in line}
    assert rows["llama.cpp"] == ["-", "-"] and rows["ar"][0] == "81.8"


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2, 3], [1, 2]) == 2


def test_results_file_is_valid_after_each_run_and_resume_checks_settings(tmp_path):
    import json

    from drafting.bench.results import BenchError, ResultsFile

    out = tmp_path / "r.json"
    meta = {"model": "m", "max_new_tokens": 8, "sampling": {"temperature": 0.0}, "raw": False, "prompt_file": "p"}
    rf = ResultsFile(out, meta, resume=False)
    rf.add(run("a", "t", "ar", 8, 1.0, 8, output_ids=[1, 2]))
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and len(doc["runs"]) == 1 and doc["summary"]["ar"]["prompts"] == 1
    again = ResultsFile(out, meta, resume=True)
    assert again.done() == {("a", "ar")} and again.reference("a") == [1, 2]
    with pytest.raises(BenchError, match="max_new_tokens"):
        ResultsFile(out, dict(meta, max_new_tokens=16), resume=True)
    out.write_text("{not json")
    with pytest.raises(BenchError, match="not a goose bench JSON"):
        ResultsFile(out, meta, resume=True)
