"""Speed modes: weight formats, ar's top-2 margins and the "identical up to ties" test, `goose doctor`, and
llama.cpp reference rows in `goose bench` (real subprocesses where a user would run the CLI)."""

from __future__ import annotations

import copy
import json
import subprocess

import pytest
from support.cli import run_goose
import torch

from drafting.weights import int8 as int8_linear
from drafting.machine.cost_curve import DEFAULT_SIZES
from drafting.engine.hooks import RecordMargins

needs_int8 = pytest.mark.skipif(not int8_linear.available(), reason="this torch build has no weight-only int8 CPU kernel")
PROMPT = json.dumps({"id": "p1", "task": "code", "prompt": "Rewrite this: def add(a, b): return a + b"})


def goose(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return run_goose(*args, timeout=timeout)


def test_tie_check_counts_only_near_ties():
    from drafting.bench.identity import tie_check

    margins = [3.0, 0.2, 1.5]
    assert tie_check(None, margins, 0.5)["exact_up_to_ties"] is True
    near = tie_check(1, margins, 0.5)
    assert near["exact_up_to_ties"] is True and near["divergence_margin"] == 0.2
    far = tie_check(2, margins, 0.5)
    assert far["exact_up_to_ties"] is False and far["divergence_margin"] == 1.5
    assert tie_check(2, None, 0.5)["exact_up_to_ties"] is False  # unknown margin is never excused
    assert tie_check(5, margins, 0.5)["exact_up_to_ties"] is False


def test_ar_margins_match_a_full_forward(tiny_lm):
    from drafting.engine.decode import Decoder
    from drafting.speculators import create

    from dataclasses import replace

    lm = replace(tiny_lm, eos_ids=set())  # run the full 20 tokens
    prompt = [5, 17, 33, 2, 90, 41]
    res = Decoder(lm, create("ar"), hooks=[RecordMargins()]).generate(prompt, 20)
    assert len(res.margins) == len(res.output_ids) == 20
    with torch.no_grad():
        logits = tiny_lm.model(torch.tensor([prompt + res.output_ids])).logits[0].float()
    top2 = logits[len(prompt) - 1 : len(prompt) - 1 + 20].topk(2, dim=-1).values
    assert torch.allclose(torch.tensor(res.margins), top2[:, 0] - top2[:, 1], atol=1e-4)
    assert Decoder(lm, create("ar")).generate(prompt, 5).margins is None  # off unless asked


@needs_int8
def test_int8_layer_multiplies_by_its_rounded_weights():
    from drafting.weights.int8 import DENSE_ROWS, Int8WeightLinear

    torch.manual_seed(0)
    dense = torch.nn.Linear(64, 48, bias=True).to(torch.bfloat16)
    layer = Int8WeightLinear(dense)
    assert layer.qweight.dtype == torch.int8 and layer.qweight.abs().max() == 127  # each row's largest weight
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    rounded = layer.qweight.float() * layer.scales.float()[:, None]
    want = x.float() @ rounded.T + dense.bias.float()
    assert torch.allclose(layer(x).float(), want, atol=0.05, rtol=0.02)
    # the rounding itself stays within half a step of each row's scale
    assert (rounded - dense.weight.float()).abs().max() <= 0.5 * layer.scales.float().max() + 1e-3
    # prompts (more than DENSE_ROWS rows) take the dense path over the same weights: the same rows, up to bf16
    many = torch.randn(DENSE_ROWS + 3, 64, dtype=torch.bfloat16)
    by_kernel = torch.cat([layer(chunk) for chunk in many.split(DENSE_ROWS)])
    assert torch.allclose(layer(many).float(), by_kernel.float(), atol=0.05, rtol=0.02)


@needs_int8
def test_int8_weights_replace_linear_layers_and_decode(tiny_lm):
    from dataclasses import replace

    from drafting.bench.identity import first_divergence, tie_check
    from drafting.engine.decode import Decoder
    from drafting.engine.loaded_model import LoadedModel
    from drafting.engine.hf import transformers_forward
    from drafting.machine.verify_cost import with_verify_cost
    from drafting.speculators import create
    from drafting.weights.formats import apply_format

    net = apply_format(copy.deepcopy(tiny_lm.model).to(torch.bfloat16), "int8")
    assert not any(type(m) is torch.nn.Linear for m in net.modules())
    lm = with_verify_cost(LoadedModel(make_forward=transformers_forward, model=net, tokenizer=None, name="tiny-int8", device=tiny_lm.device, dtype=torch.bfloat16,
                     eos_ids={127}, max_context=512, weights="int8"))
    assert lm.vocab_size == 128 and lm.mode == "bfloat16+int8"
    ids = torch.tensor([[5, 17, 33, 2, 90, 41]])
    with torch.inference_mode():
        got = net(ids).logits[0].float()
        want = tiny_lm.model(ids).logits[0]
    assert (got - want).abs().max() < 0.1 * want.abs().max()  # the same network, its weights rounded
    # decoding through the int8 layers (cache, tree mask) gives the int8 network's own greedy tokens, as fresh
    # full forwards compute them, and a tree speculator gives ar's; a divergence is excused only at a tie within a
    # few bf16 steps (this random model's logits are all below 1, so its top-2 gaps are small but mostly wider)
    noise = 0.01
    prompt = [5, 17, 33, 2]
    ar = Decoder(replace(lm, eos_ids=set()), create("ar"), hooks=[RecordMargins()]).generate(prompt, 12)
    ids = list(prompt)
    margins = []
    with torch.inference_mode():
        for _ in range(12):
            top2 = net(torch.tensor([ids])).logits[0, -1].float().topk(2)
            margins.append(float(top2.values[0] - top2.values[1]))
            ids.append(int(top2.indices[0]))
    full = ids[len(prompt):]
    assert len(ar.output_ids) == 12
    assert tie_check(first_divergence(full, ar.output_ids), margins, noise)["exact_up_to_ties"]
    pld = Decoder(replace(lm, eos_ids=set()), create("pld:gate=off,min_ngram=1")).generate(prompt, 12).output_ids
    assert tie_check(first_divergence(ar.output_ids, pld), ar.margins, noise)["exact_up_to_ties"]


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")
def test_onednn_weights_compute_the_same_rows_whatever_the_batch(tiny_lm):
    from drafting.weights.formats import apply_format

    net = apply_format(copy.deepcopy(tiny_lm.model), "onednn")
    assert not any(type(m) is torch.nn.Linear for m in net.modules())
    ids = torch.tensor([[5, 17, 33, 2, 90, 41, 7, 64]])
    with torch.inference_mode():
        want = tiny_lm.model(ids).logits[0]
        got = net(ids).logits[0]
        # the last row alone, after the others are cached: the batch must not change a row beyond rounding
        out = net(ids[:, :-1], use_cache=True)
        last = net(ids[:, -1:], cache=out.past_key_values).logits[0, 0]
    assert torch.allclose(got, want, atol=1e-4)
    assert torch.allclose(last, got[-1], atol=1e-4)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")
def test_onednn_layer_matches_torch_linear_in_both_dtypes():
    from drafting.weights.onednn import OneDNNLinear, packs_bfloat16

    torch.manual_seed(0)
    dtypes = ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)) if packs_bfloat16() else ((torch.float32, 1e-5),)
    for dtype, tol in dtypes:
        dense = torch.nn.Linear(64, 48).to(dtype)
        packed = OneDNNLinear(dense)
        for rows in (1, 2, 16):
            x = torch.randn(1, rows, 64, dtype=dtype)
            with torch.inference_mode():
                got, want = packed(x), dense(x)
            assert got.shape == want.shape and got.dtype == dtype
            assert torch.allclose(got.float(), want.float(), atol=tol, rtol=tol)


def test_onednn_formats_refuse_bfloat16_where_the_cpu_cannot_pack_it():
    from drafting.errors import WeightsError
    from drafting.weights.formats import check_format
    from drafting.weights.onednn import packs_bfloat16
    from drafting.weights.probe import candidates

    cpu = torch.device("cpu")
    if packs_bfloat16():
        check_format("onednn", cpu, torch.bfloat16)
        check_format("dual", cpu, torch.bfloat16)
        return
    for name in ("onednn", "dual"):
        with pytest.raises(WeightsError, match="cannot run in bfloat16 here"):
            check_format(name, cpu, torch.bfloat16)
        check_format(name, cpu, torch.float32)
    assert "onednn" not in candidates(torch.bfloat16, cpu)  # auto times only what runs here


def test_auto_weights_are_measured_only_on_cpu():
    from drafting.weights.formats import resolve_format

    cpu = torch.device("cpu")
    fast = "auto" if torch.backends.mkldnn.is_available() else "float"  # auto: drafting.weights.probe decides
    assert resolve_format("auto", cpu, torch.float32) == fast
    assert resolve_format("auto", cpu, torch.bfloat16) == fast
    assert resolve_format("auto", torch.device("cuda"), torch.float32) == "float"
    assert resolve_format("int8", cpu, torch.bfloat16) == "int8"


def test_bad_weight_formats_are_one_sentence():
    from drafting.errors import WeightsError
    from drafting.weights.formats import apply_format, check_format

    cpu = torch.device("cpu")
    with pytest.raises(WeightsError, match="Unknown weight format"):
        check_format("int4", cpu, torch.float32)
    with pytest.raises(WeightsError, match="bfloat16"):
        check_format("int8", cpu, torch.float32)
    check_format("int8", cpu, torch.bfloat16)
    with pytest.raises(WeightsError, match="concrete"):
        apply_format(torch.nn.Linear(2, 2), "auto")


def test_doctor_bad_input_is_one_sentence():
    for args, phrase in ((["--modes", "float64"], "Unknown dtype"), (["--modes", "float32+int8"], "cannot run here"),
                         (["--device", "tpu"], "Unknown device"), (["--model", "./nowhere"], "does not exist")):
        proc = goose("doctor", *args, timeout=60)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
        assert phrase in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_every_doctor_option_has_help():
    proc = goose("doctor", "--help", timeout=60)
    assert proc.returncode == 0
    for opt in ("--model", "--device", "--modes", "--prefix", "--max-rows", "--repeats", "--json"):
        assert opt in proc.stdout


@pytest.mark.slow
def test_doctor_measures_each_mode(tmp_path):
    out = tmp_path / "doctor.json"
    proc = goose("doctor", "--modes", "float32,bfloat16,bfloat16+int8", "--max-rows", "8", "--repeats", "1",
                 "--prefix", "32", "--even-if-busy", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert [m["mode"] for m in doc["modes"]] == ["float32", "bfloat16", "bfloat16+int8"]
    for m in doc["modes"]:  # a mode far slower than the fastest is timed at one row only
        assert m["error"] is None and m["sizes"] == ([1] if m["gave_up"] else [n for n in DEFAULT_SIZES if n <= 8])
        assert all(s > 0 for s in m["seconds"])
    assert doc["auto"]["dtype"] == "float32" and doc["fastest"] in ("float32", "bfloat16", "bfloat16+int8")
    assert "--dtype auto picks float32" in proc.stdout


@pytest.mark.slow
def test_bench_low_precision_reports_margins_and_llama_cpp_rows(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(PROMPT + "\n")
    out = tmp_path / "b.json"
    # pld unpriced and float weights: no cost curve or weight-format probe to measure, which on an AVX2 CPU (bfloat16
    # emulated) took minutes; this test is about margins and reference rows, not budgets
    pld_spec = specs = "pld:priced=off"
    from drafting.baselines.llama_cpp import available

    if available():
        specs += ",llama.cpp,llama.cpp-pld"
    proc = goose("bench", str(path), "-s", specs, "-n", "24", "--dtype", "bfloat16", "--weights", "float",
                 "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    runs = {r["speculator"]: r for r in doc["runs"]}
    margins = runs["ar"]["margins"]
    assert len(margins) == runs["ar"]["new_tokens"] and all(m >= 0 for m in margins) and runs["ar"]["exact_up_to_ties"]
    pld = runs[pld_spec]
    assert pld["tie_margin"] == doc["tie_margin"] == 0.5
    if pld["identical_to_ar"]:
        assert pld["first_divergence"] is None and pld["divergence_margin"] is None
    else:
        assert pld["output_ids"][: pld["first_divergence"]] == runs["ar"]["output_ids"][: pld["first_divergence"]]
        assert pld["divergence_margin"] == margins[pld["first_divergence"]]
    assert pld["exact_up_to_ties"] == (pld["identical_to_ar"] or pld["divergence_margin"] <= pld["tie_margin"])
    assert pld["exact_up_to_ties"]  # bf16 is exact up to near-ties, or it is not lossless
    summary = doc["summary"][pld_spec]
    assert summary["identical"] == int(pld["identical_to_ar"]) and summary["exact_up_to_ties"] == 1
    assert summary["divergence_margins"] == ([] if pld["identical_to_ar"] else [pld["divergence_margin"]])
    if available():
        for name in ("llama.cpp", "llama.cpp-pld"):
            assert runs[name]["external"] and runs[name]["identical_to_ar"] is None
            assert runs[name]["new_tokens"] > 0 and runs[name]["wall_s"] > 0
            assert doc["summary"][name]["identical"] is None


def test_int8_refuses_float32_from_the_cli(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(PROMPT + "\n")
    proc = goose("bench", str(path), "--dtype", "float32", "--weights", "int8", timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "--weights int8" in proc.stderr
