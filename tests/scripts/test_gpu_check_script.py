"""scripts/gpu_check.sh --cpu: the GPU check's every step, run on CPU with tiny models, passes and writes its
table and JSON; a bad option gets one sentence and a non-zero exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
STEPS = {"tree logits", "greedy identity", "doctor", "bench", "timing", "static shapes"}


def _run(*args, out: Path | None = None, cache: Path | None = None, timeout: int = 120):
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
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
    assert data["ok"] and data["cpu_mode"] and data["complete"]
    names = {c["name"] for c in data["checks"]}
    assert names == STEPS
    assert all(c["ok"] for c in data["checks"])
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


def test_without_a_gpu_it_says_so():
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the script would run its full GPU check")
    proc = _run()
    assert proc.returncode == 2
    assert "no CUDA GPU" in proc.stderr and "--cpu" in proc.stderr and "Traceback" not in proc.stderr


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
