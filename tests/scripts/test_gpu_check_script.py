"""scripts/gpu_check.sh --cpu: the GPU check's every step, run on CPU with tiny models, passes and writes its
table, JSON and markdown; a bad option gets one sentence and a non-zero exit; the script runs the interpreter
whose torch sees a GPU, and without one names the torch it found. Each row's own failures:
test_gpu_check_rows.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
STEPS = {"tree logits", "greedy identity", "doctor", "bench", "timing", "static shapes"}


def _run(*args, out: Path | None = None, cache: Path | None = None, timeout: int = 300, path: str | None = None):
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    if path is not None:
        env["PATH"] = path
    if cache is not None:
        env["GOOSE_CACHE"] = str(cache)  # the cost curves of the random models stay out of the user's cache
    env.pop("OUT", None)
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_cpu_run_passes_and_writes_json_to_out(tmp_path):
    proc = _run("--cpu", out=tmp_path, cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all checks passed" in proc.stdout
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert data["all_passed"] and data["cpu_mode"] and data["complete"]
    assert (data["passed"], data["failed"], data["skipped"]) == (len(data["checks"]), 0, 0)
    names = {c["name"] for c in data["checks"]}
    assert names == STEPS
    assert all(c["ok"] and c["status"] == "ok" for c in data["checks"])
    markdown = (tmp_path / "gpu_check.md").read_text()
    assert markdown.count("| ok |") == len(data["checks"]) and "all checks passed" in markdown
    doctor = next(c for c in data["checks"] if c["name"] == "doctor")
    assert doctor["sizes"] == [1, 2, 4, 8, 16, 32, 64, 128] and all(ms > 0 for ms in doctor["ms"])
    bench = next(c for c in data["checks"] if c["name"] == "bench")
    assert set(bench["summary"]) == {"ar", "pld", "goose"}
    for name in STEPS:
        assert name in proc.stdout  # one table row per check


def test_unknown_step_is_one_sentence(tmp_path):
    proc = _run("--cpu", "--skip", "nonsense")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "gpu_check: unknown step(s) in --skip: nonsense."
    assert "Traceback" not in proc.stderr


def test_without_a_gpu_it_names_the_torch_it_found():
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the script would run its full GPU check")
    proc = _run()
    assert proc.returncode == 2
    assert f"{sys.executable} (torch {torch.__version__}, no CUDA GPU visible)" in proc.stderr
    assert "--cpu" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def _fake_python(folder: Path, version: str, cuda: int) -> Path:
    """A `python3` that answers the script's probe with ``version`` and ``cuda`` and reports what it was asked
    to run instead of running it."""
    folder.mkdir()
    fake = folder / "python3"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = "-c" ]; then echo "{version} {cuda}"; exit 0; fi\necho "ran $*"\n')
    fake.chmod(0o755)
    return fake


def test_an_interpreter_whose_torch_sees_a_gpu_is_preferred(tmp_path):
    """$PYTHON (here a CPU build of torch) comes first, but the check needs CUDA: python3 on PATH has it."""
    fake = _fake_python(tmp_path / "bin", "2.99.0+cu999", 1)
    proc = _run("--skip", "doctor", path=f"{fake.parent}:{os.environ['PATH']}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"ran {SCRIPT.parent / 'gpu_check.py'} --skip doctor"


def test_with_cpu_the_first_interpreter_with_torch_runs_it(tmp_path):
    fake = _fake_python(tmp_path / "bin", "2.99.0+cu999", 1)
    proc = _run("--cpu", "--skip", "correctness,doctor,bench,static", path=f"{fake.parent}:{os.environ['PATH']}")
    assert proc.returncode == 0, proc.stderr
    assert "0 passed, 6 skipped: not all checks ran" in proc.stdout and "all checks passed" not in proc.stdout


def test_the_8b_shape_is_built_on_the_device_it_is_given():
    """The GPU run builds Llama-3-8B's shape inside torch.device("cuda"); on the meta device the same call shows
    that no weight is made anywhere else and that the shape is the published one."""
    import torch

    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_models import parameter_count, random_llama

    lm = random_llama("llama3-8b", torch.device("meta"), torch.bfloat16)
    params = list(lm.model.parameters())
    assert {p.device.type for p in params} == {"meta"} and {p.dtype for p in params} == {torch.bfloat16}
    assert parameter_count(lm) == "8.03B"
    assert lm.vocab_size == 128256 and lm.max_context == 8192
