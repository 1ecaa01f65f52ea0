"""Where llama.cpp runs: one decision (drafting.engine.llama.offload) of how many layers go to a GPU, from --device
and what the build can do, taken by goose's engine, the plain llama.cpp rows and llama-server's -ngl alike.

The build's capability is one small probe (``gpu_offload_supported``), faked here to say yes or no; the models
that load are real llama.cpp on the CPU (a CPU build ignores the layers it is asked to offload)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from drafting.engine.llama import offload
from drafting.engine.llama.offload import (
    GPU, gpu_layers_beside, gpu_layers_for, llama_device, offload_device, server_gpu_layers,
)
from drafting.engine.loaded_model import LoadedModel
from drafting.errors import ModelError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gpu_build(monkeypatch):
    """This llama-cpp-python as if built with GPU support."""
    monkeypatch.setattr(offload, "gpu_offload_supported", lambda: True)


@pytest.fixture
def cpu_build(monkeypatch):
    """This llama-cpp-python as if built for the CPU only."""
    monkeypatch.setattr(offload, "gpu_offload_supported", lambda: False)


def _one_sentence(text: str) -> bool:
    return text.endswith(".") and text.count(". ") == 0 and "\n" not in text


def test_a_gpu_build_offloads_every_layer_unless_the_cpu_is_asked_for(gpu_build):
    assert [gpu_layers_for(d) for d in ("auto", "cuda", "cuda:0", "cpu")] == [-1, -1, -1, 0]
    assert offload_device(-1) == torch.device(GPU) and offload_device(0) == torch.device("cpu")
    assert llama_device("auto").type == GPU and llama_device("cpu").type == "cpu"
    # a reference row goes where goose's model is
    assert gpu_layers_beside(torch.device("cuda")) == -1 and gpu_layers_beside(torch.device("cpu")) == 0


def test_a_cpu_build_runs_on_the_cpu_and_refuses_cuda_in_one_sentence(cpu_build):
    assert gpu_layers_for("auto") == 0 and gpu_layers_for("cpu") == 0
    assert offload_device(-1) == torch.device("cpu")  # layers asked for, none offloaded: it says cpu
    assert gpu_layers_beside(torch.device("cuda")) == 0  # a row beside goose on a GPU runs on the CPU, and says so
    for device in ("cuda", "cuda:0"):
        with pytest.raises(ModelError, match="built for the CPU only") as err:
            gpu_layers_for(device)
        assert _one_sentence(str(err.value)), str(err.value)


@pytest.mark.parametrize("device, says", [("cuda:1", "CUDA_VISIBLE_DEVICES=1"), ("tpu", "Unknown device 'tpu'")])
def test_devices_llama_cpp_cannot_place_are_refused_in_one_sentence(gpu_build, device, says):
    with pytest.raises(ModelError, match=says) as err:
        gpu_layers_for(device)
    assert _one_sentence(str(err.value)), str(err.value)


def test_the_server_takes_every_layer_as_its_own_word_for_all():
    assert server_gpu_layers(-1) == "999" and server_gpu_layers(0) == "0" and server_gpu_layers(12) == "12"


def _model_on(device: str, gguf: Path) -> LoadedModel:
    return LoadedModel(model=None, tokenizer=None, name="m.gguf", device=torch.device(device), dtype=torch.float32,
                       eos_ids={2}, max_context=2048, gguf=gguf)


@pytest.mark.parametrize("build, beside, layers, device", [
    ("gpu", "cuda", "999", GPU), ("gpu", "cpu", "0", "cpu"), ("cpu", "cuda", "0", "cpu"),
])
def test_llama_server_is_started_where_the_other_rows_run(monkeypatch, tmp_path, build, beside, layers, device):
    from drafting.baselines.llama_server import SERVER_ENV, LlamaServerRunner

    monkeypatch.setattr(offload, "gpu_offload_supported", lambda: build == "gpu")
    server = tmp_path / "llama-server"
    server.write_text("")  # named, never started: the command line is what is checked
    monkeypatch.setenv(SERVER_ENV, str(server))
    row = LlamaServerRunner(_model_on(beside, tmp_path / "m.gguf"))
    cmd = row.command(8080)
    assert cmd[cmd.index("-ngl") + 1] == layers == server_gpu_layers(gpu_layers_beside(torch.device(beside)))
    assert row.device == device


def test_a_model_loaded_with_gpu_offload_records_the_gpu(gpu_build):
    pytest.importorskip("llama_cpp")
    from drafting.baselines.llama_cpp_plain import LlamaCppPlainRunner
    from drafting.bench.timing import ForwardTimer
    from drafting.engine.decode import Decoder
    from drafting.machine.step_hooks import machine_hooks
    from drafting.models.chat_template import encode
    from drafting.models.loader import load_model
    from drafting.speculators import create

    lm = load_model(engine="llama.cpp", device="cuda")
    try:
        assert lm.model.settings.gpu_layers == -1
        assert lm.device == torch.device(GPU) and f"({GPU})" in lm.describe()
        assert "-1 GPU layers" in lm.weights_key  # its cost curve is not the CPU's
        timer = ForwardTimer(lm.model, lm.device)  # llama.cpp times its own passes: no torch events for it
        ids = encode(lm.tokenizer, [{"role": "user", "content": "Count to five."}])
        out = Decoder(lm, create("ar"), hooks=machine_hooks()).generate(ids, 4)  # on the CPU, run as if offloaded
        assert len(out.output_ids) == 4 and timer.take() == []
        timer.close()
        row = LlamaCppPlainRunner(lm)
        try:
            assert row.owner is lm.model and row.device == GPU  # the row shares the engine's weights, where they are
        finally:
            row.close()
    finally:
        lm.model.close()


def test_asking_a_cpu_build_for_cuda_is_one_sentence_before_anything_loads(cpu_build):
    from drafting.models.loader import load_model

    with pytest.raises(ModelError, match="built for the CPU only") as err:
        load_model(engine="llama.cpp", device="cuda")
    assert _one_sentence(str(err.value))


def test_llama_cpp_on_the_cpu_says_cpu(cpu_build):
    pytest.importorskip("llama_cpp")
    from drafting.models.loader import load_model

    lm = load_model(engine="llama.cpp", device="auto")
    try:
        assert lm.model.settings.gpu_layers == 0 and lm.device == torch.device("cpu") and "(cpu)" in lm.describe()
    finally:
        lm.model.close()


def _make_vars(path_dir: Path) -> str:
    """What `make llamacpp-setup` would hand CMake, with ``path_dir`` first on PATH."""
    env = dict(os.environ, PATH=f"{path_dir}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(["make", "--no-print-directory", "--eval", "show: ; @echo '$(LLAMA_CMAKE_ARGS)'", "show"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_llamacpp_setup_builds_with_cuda_only_where_nvcc_and_a_gpu_are(tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()

    def tool(name: str, script: str) -> None:
        (tools / name).write_text("#!/bin/sh\n" + script + "\n")
        (tools / name).chmod(0o755)

    tool("nvcc", "exit 0")
    tool("nvidia-smi", 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"')
    assert f"-DGGML_CUDA=on -DCMAKE_CUDA_COMPILER={tools / 'nvcc'}" in _make_vars(tools)
    tool("nvidia-smi", 'echo "No devices were found"; exit 6')  # the toolkit without a GPU: the CPU build
    assert "GGML_CUDA" not in _make_vars(tools) and "-DGGML_NATIVE=ON" in _make_vars(tools)
