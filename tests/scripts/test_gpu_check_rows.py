"""Every row of scripts/gpu_check.py can fail: each is fed a wrong result (a perturbed logit row, an output that
differs beyond a tie, a wrong reference, flat logits, a doctor curve that is not a curve, phases longer than the
run, a static path that decodes otherwise) and says so; a skipped row is neither ok nor failed, the last line
then does not say all passed, and a failed row makes the exit status 1. Tiny models on CPU: seconds each."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import bench_step  # noqa: E402
import gpu_check  # noqa: E402
import gpu_checks as gc  # noqa: E402
import static_step  # noqa: E402
from drafting.engine.decode import Decoder  # noqa: E402
from drafting.speculators import create  # noqa: E402
from gpu_models import random_llama  # noqa: E402

BF16, FP32 = torch.bfloat16, torch.float32


@pytest.fixture(scope="module")
def bf16_lm():
    return random_llama("tiny", torch.device("cpu"), BF16)


@pytest.fixture(scope="module")
def fp32_lm():
    return random_llama("tiny", torch.device("cpu"), FP32)


def _decisive(ref: gc.Reference, dtype) -> int:
    """The first reference token whose top-2 gap is beyond a tie."""
    return next(i for i, tie in enumerate(gc.near_tie(ref.top2, dtype).tolist()) if not tie)


def _wrong_at(ids: list[int], i: int, vocab: int) -> list[int]:
    return ids[:i] + [(ids[i] + 1) % vocab] + ids[i + 1:]


def _ar(lm, prompt: list[int], tokens: int) -> list[int]:
    return Decoder(lm, create("ar")).generate(prompt, tokens).output_ids


# --- the comparison every identity row shares -----------------------------------------------------------------

def test_ulp_is_the_spacing_of_bfloat16_numbers():
    assert float(gc.ulp(10.0, BF16)) == 2.0 ** (3 - 7)
    assert float(gc.ulp(-1.5, BF16)) == 2.0 ** -7
    assert float(gc.ulp(0.75, BF16)) == 2.0 ** (-1 - 7)
    x = torch.tensor(10.0, dtype=BF16)
    assert x + float(gc.ulp(10.0, BF16)) != x and x + 0.4 * float(gc.ulp(10.0, BF16)) == x


def test_judge_tells_a_near_tie_from_a_real_difference():
    # top logit 10: one bf16 step is 1/16, the tie margin 8 steps = 0.5
    ref = gc.Reference([5, 6, 7], torch.tensor([[10.0, 2.0], [10.0, 9.75], [10.0, 9.0]]), [5, 6, 7])
    assert gc.judge(ref, [5, 6, 7], BF16, exact=False)["verdict"] == "identical"
    assert gc.judge(ref, [5, 9, 7], BF16, exact=False) == {"verdict": "tie", "at": 1, "gap": 0.25, "margin": 0.5}
    assert gc.judge(ref, [5, 9, 7], BF16, exact=True)["verdict"] == "differs"
    assert gc.judge(ref, [5, 6, 1], BF16, exact=False)["verdict"] == "differs"  # gap 1.0: beyond the tie
    assert gc.judge(ref, [1, 6, 7], BF16, exact=False)["verdict"] == "differs"
    assert gc.judge(ref, [5, 6, 7, 8], BF16, exact=False)["verdict"] == "differs"  # went on past the reference
    assert gc.judge(ref, [5, 9, 7], FP32, exact=False)["verdict"] == "differs"  # float32 ties are 2e-3 wide


# --- tree logits ----------------------------------------------------------------------------------------------

def test_tree_row_fails_on_a_perturbed_logit_row(bf16_lm):
    tree, seq = gc.tree_vs_sequential(bf16_lm, 1, 12)
    assert gc.tree_verdict(tree, seq, BF16)["ok"]
    top = seq.topk(2, dim=-1)
    node = next(i for i, tie in enumerate(gc.near_tie(top.values, BF16).tolist()) if not tie)
    bad = tree.clone()
    bad[node, top.indices[node, 1]] = top.values[node, 0] + 1.0  # the runner-up now wins, where the model was sure
    v = gc.tree_verdict(bad, seq, BF16)
    assert not v["ok"] and v["flips_beyond_tie"] == 1


def test_tree_row_in_float32_fails_beyond_its_tolerance(fp32_lm):
    tree, seq = gc.tree_vs_sequential(fp32_lm, 1, 12)
    assert gc.tree_verdict(tree, seq, FP32)["ok"]
    bad = tree.clone()
    bad[0, 0] += 10 * gc.FP32_ATOL
    assert not gc.tree_verdict(bad, seq, FP32)["ok"]


def test_tree_row_fails_on_flat_logits_though_nothing_flipped():
    seq = torch.zeros(10, 50)
    seq[:, 0], seq[:, 1] = 1.0, 0.999  # every top-2 gap far inside a tie: a flip could never count
    v = gc.tree_verdict(seq.clone(), seq, BF16)
    assert v["argmax_flips"] == 0 and v["nodes_beyond_tie"] == 0 and not v["ok"]


# --- greedy identity (and the verdict bench and static rows share) -------------------------------------------

def test_identity_fails_on_an_output_that_differs_beyond_a_tie(bf16_lm):
    prompt = gc.repetitive_prompts(bf16_lm.vocab_size, 1)[0]
    out = _ar(bf16_lm, prompt, 16)
    ref = gc.reference(bf16_lm, prompt, out)
    assert gc.identity_verdict({"goose": [(ref, out)]}, BF16, exact=False)["ok"]
    bad = _wrong_at(out, _decisive(ref, BF16), bf16_lm.vocab_size)
    v = gc.identity_verdict({"goose": [(ref, bad)]}, BF16, exact=False)
    assert not v["ok"] and v["speculators"]["goose"]["differ"] == 1
    assert "DIFFER" in gc.identity_figures(v) and "first real difference" in gc.identity_figures(v)


def test_identity_fails_when_the_reference_itself_is_wrong(bf16_lm):
    """A reference decoding wrongly, compared with outputs just as wrong, is caught by its fresh pass."""
    prompt = gc.repetitive_prompts(bf16_lm.vocab_size, 1)[0]
    out = _ar(bf16_lm, prompt, 16)
    bad = _wrong_at(out, _decisive(gc.reference(bf16_lm, prompt, out), BF16), bf16_lm.vocab_size)
    wrong = gc.reference(bf16_lm, prompt, bad)
    v = gc.identity_verdict({"goose": [(wrong, bad)]}, BF16, exact=False)
    assert v["speculators"]["goose"]["identical"] == 1 and v["reference_unexplained"] >= 1 and not v["ok"]


def test_identity_fails_on_flat_logits_though_every_output_is_identical():
    ref = gc.Reference([3] * 20, torch.tensor([[1.0, 0.999]] * 20), [3] * 20)
    v = gc.identity_verdict({"goose": [(ref, [3] * 20)]}, BF16, exact=False)
    assert v["speculators"]["goose"]["identical"] == 1 and not v["ok"]
    assert "TOO FEW" in gc.identity_figures(v)


class _Wrong(Decoder):
    """A decoder that emits a wrong token where the model was sure (for a static step only, when ``static``)."""

    static = False

    def generate(self, prompt_ids, max_new_tokens, **kw):
        res = super().generate(prompt_ids, max_new_tokens, **kw)
        if self.speculator.name != "ar" and (self.static_shapes is not None or not self.static):
            ref = gc.reference(self.lm, prompt_ids, res.output_ids)
            res.output_ids = _wrong_at(res.output_ids, _decisive(ref, self.lm.dtype), self.lm.vocab_size)
        return res


def test_greedy_identity_row_fails_when_a_speculator_decodes_otherwise(bf16_lm, monkeypatch):
    prompts = gc.repetitive_prompts(bf16_lm.vocab_size, 2)
    assert gc.greedy_identity(bf16_lm, ["pld"], prompts, 12)["ok"]
    monkeypatch.setattr(gc, "Decoder", _Wrong)
    row = gc.greedy_identity(bf16_lm, ["pld"], prompts, 12)
    assert not row["ok"] and row["speculators"]["pld"]["differ"] == 2


# --- bench ----------------------------------------------------------------------------------------------------

def test_bench_row_fails_on_a_run_that_differs_from_ar_or_a_run_missing(fp32_lm):
    prompts = dict(zip("ab", gc.repetitive_prompts(fp32_lm.vocab_size, 2)))
    outs = {p: _ar(fp32_lm, ids, 12) for p, ids in prompts.items()}
    runs = [{"prompt_id": p, "speculator": s, "output_ids": list(outs[p])} for p in prompts for s in bench_step.SPECS]
    assert bench_step.bench_row(fp32_lm, prompts, runs, {})["ok"]
    wrong = [dict(r) for r in runs]
    goose_b = next(r for r in wrong if r["prompt_id"] == "b" and r["speculator"] == "goose")
    goose_b["output_ids"] = _wrong_at(outs["b"], 3, fp32_lm.vocab_size)  # float32: any difference is real
    row = bench_step.bench_row(fp32_lm, prompts, wrong, {})
    assert not row["ok"] and row["speculators"]["goose"]["differ"] == 1
    row = bench_step.bench_row(fp32_lm, prompts, runs[:-1], {})
    assert not row["ok"] and "ONLY 5 OF 6 RUNS" in row["figures"]


# --- static shapes --------------------------------------------------------------------------------------------

def test_static_row_fails_when_the_static_path_decodes_otherwise(fp32_lm, monkeypatch):
    prompts = gc.repetitive_prompts(fp32_lm.vocab_size, 3, seed=1)
    assert static_step.static_identity(fp32_lm, ["ar", "pld"], prompts, 12, compile=False)["ok"]
    monkeypatch.setattr(_Wrong, "static", True)
    monkeypatch.setattr(static_step, "Decoder", _Wrong)
    row = static_step.static_identity(fp32_lm, ["ar", "pld"], prompts, 12, compile=False)
    assert not row["ok"] and row["speculators"]["pld"]["differ"] == 2 and row["speculators"]["ar"]["differ"] == 0


def test_static_row_fails_when_something_compiles_while_timed(fp32_lm, monkeypatch):
    calls = iter(range(100))
    monkeypatch.setattr(static_step, "compiles", lambda: next(calls))  # one more graph by the end of timing
    row = static_step.static_identity(fp32_lm, ["ar"], gc.repetitive_prompts(fp32_lm.vocab_size, 2), 8, False)
    assert not row["ok"] and row["compilations_while_timed"] == 1 and "COMPILATIONS WHILE TIMED" in row["figures"]


# --- doctor and timing ----------------------------------------------------------------------------------------

SIZES = (1, 2, 4, 8)


@pytest.mark.parametrize("sizes, seconds, prefill, ok", [
    (SIZES, [0.010, 0.0102, 0.0105, 0.012], 0.05, True),
    (SIZES, [0.030, 0.010, 0.010, 0.010], 0.05, False),  # one row dearer than eight: a spike, not a curve
    (SIZES, [0.010, 0.010, 0.010, 0.200], 0.05, False),  # eight rows 20x four: more than in proportion
    (SIZES, [0.0, 0.010, 0.010, 0.010], 0.05, False),
    (SIZES, [float("nan"), 0.010, 0.010, 0.010], 0.05, False),
    ((1, 2, 4), [0.010, 0.010, 0.010], 0.05, False),  # stopped early
    (SIZES, [0.010, 0.0102, 0.0105, 0.012], 0.0, False),
])
def test_doctor_verdict_accepts_a_cost_curve_only(sizes, seconds, prefill, ok):
    assert (gc.doctor_verdict(SIZES, list(sizes), seconds, prefill) is None) is ok


def test_doctor_row_fails_on_a_measurement_that_is_not_a_curve(bf16_lm, monkeypatch):
    from drafting.machine.cost_curve import CostCurve

    monkeypatch.setattr(gc, "measure", lambda lm, sizes, prefix, repeats: CostCurve(
        sizes=list(sizes), seconds=[0.05] + [0.001] * (len(sizes) - 1)))
    row = gc.doctor(bf16_lm, SIZES, 16)
    assert not row["ok"] and "NOT A COST CURVE" in row["figures"]


def test_doctor_row_measures_a_spiky_curve_once_more(bf16_lm, monkeypatch):
    from drafting.machine.cost_curve import CostCurve

    spiky = [0.05] + [0.001] * (len(SIZES) - 1)  # what a busy machine can leave in one measurement
    curves = iter([spiky, [0.001 * n for n in SIZES]])
    monkeypatch.setattr(gc, "measure", lambda lm, sizes, prefix, repeats: CostCurve(
        sizes=list(sizes), seconds=next(curves)))
    row = gc.doctor(bf16_lm, SIZES, 16)
    assert row["ok"] and row["ms"] == pytest.approx(list(SIZES))


def test_timing_row_fails_when_phases_exceed_the_wall_time_or_nothing_ran():
    good = {"draft_s": 0.2, "verify_s": 0.6, "prefill_s": 0.1, "wall_s": 1.0, "forward_s": 0.7}
    assert gc.timing_sanity([good])["ok"]
    assert not gc.timing_sanity([{**good, "verify_s": 0.8}])["ok"]  # 1.1 s of phases in a 1 s run
    assert not gc.timing_sanity([{**good, "forward_s": 1.1}])["ok"]
    assert not gc.timing_sanity([])["ok"]
    assert not gc.timing_sanity([{**good, "wall_s": 0.0}])["ok"]


# --- the runner: skipped rows, the last line, the exit status --------------------------------------------------

def _doctor_row(ok=True):
    return lambda p, device: {"name": "doctor", "setting": "fake", "figures": "fake", "ok": ok}


def _main(monkeypatch, tmp_path, *args):
    monkeypatch.delenv("OUT", raising=False)
    return gpu_check.main(["--cpu", "--json", str(tmp_path / "g.json"), *args])


def test_a_skipped_row_is_neither_ok_nor_failed_and_not_all_passed(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(gpu_check, "doctor", _doctor_row())
    assert _main(monkeypatch, tmp_path, "--skip", "correctness,bench,static") == 0
    out = capsys.readouterr().out
    assert "all checks passed" not in out and "1 passed, 5 skipped: not all checks ran" in out
    data = json.loads((tmp_path / "g.json").read_text())
    assert (data["passed"], data["failed"], data["skipped"], data["all_passed"]) == (1, 0, 5, False)
    skipped = [c for c in data["checks"] if c["status"] == "skipped"]
    assert {c["name"] for c in skipped} == {"tree logits", "greedy identity", "bench", "timing", "static shapes"}
    assert not any(c["ok"] for c in skipped)
    assert "| skipped |" in (tmp_path / "g.md").read_text()


def test_a_static_step_past_its_deadline_is_skipped_not_passed(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(gpu_check, "STATIC_DEADLINE_S", -1)
    monkeypatch.setattr(gpu_check, "doctor", _doctor_row())
    assert _main(monkeypatch, tmp_path, "--skip", "correctness,bench") == 0
    static = next(c for c in json.loads((tmp_path / "g.json").read_text())["checks"] if c["name"] == "static shapes")
    assert static["status"] == "skipped" and not static["ok"] and "took over" in static["figures"]
    assert "all checks passed" not in capsys.readouterr().out


@pytest.mark.parametrize("ok", [False, "yes", None])
def test_a_failed_row_fails_the_run(monkeypatch, tmp_path, capsys, ok):
    monkeypatch.setattr(gpu_check, "doctor", _doctor_row(ok))  # only a check's own True passes
    assert _main(monkeypatch, tmp_path, "--skip", "correctness,bench,static") == 1
    assert "SOME CHECKS FAILED: 0 passed, 1 failed, 5 skipped" in capsys.readouterr().out


def test_a_step_that_raises_is_a_failed_row(monkeypatch, tmp_path, capsys):
    def boom(p, device):
        raise RuntimeError("the device went away")

    monkeypatch.setattr(gpu_check, "doctor", boom)
    assert _main(monkeypatch, tmp_path, "--skip", "correctness,bench,static") == 1
    doctor = json.loads((tmp_path / "g.json").read_text())["checks"][2]
    assert doctor["status"] == "failed" and "RuntimeError: the device went away" in doctor["figures"]
    assert "SOME CHECKS FAILED" in capsys.readouterr().out


def test_all_passed_only_when_every_row_ran_and_passed():
    rows = [{"status": "ok"}] * 3
    assert gpu_check.summary(rows) == "all checks passed (3)"
    assert gpu_check.summary(rows + [{"status": "skipped"}]) == "3 passed, 1 skipped: not all checks ran"
    assert gpu_check.summary([]) == "0 passed, 0 skipped: not all checks ran"
