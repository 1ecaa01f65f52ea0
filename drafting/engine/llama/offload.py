"""Where llama.cpp runs a model's layers: the one decision of how many go to a GPU, from the device asked for and
what this llama-cpp-python was built with. goose's own llama.cpp engine, the plain llama.cpp reference rows and
llama-server's ``-ngl`` all take it from here, so the rows of one bench run where goose's model runs, and each
can say where that is."""

from __future__ import annotations

import sys

import torch

from drafting.engine.llama.net import llama_lib
from drafting.errors import ModelError

ALL_LAYERS = -1  # llama.cpp's "every layer" in its model parameters
# the same for llama-server's -ngl: more layers than any model has (newer servers read -1 as "fit to memory",
# older ones do not know "all")
SERVER_ALL_LAYERS = "999"
# the GPU llama.cpp offloads to, as torch names it: Metal on a Mac, CUDA (or ROCm, which torch also calls cuda)
# elsewhere
GPU = "mps" if sys.platform == "darwin" else "cuda"


def gpu_offload_supported() -> bool:
    """Whether this llama-cpp-python was built with a GPU backend: the one probe of the build (tests fake it)."""
    return bool(llama_lib().llama_supports_gpu_offload())


def gpu_layers_for(device: str) -> int:
    """Layers to offload for ``--device``: all of them on ``cuda``, and on ``auto`` where the build can offload;
    none on ``cpu``. ModelError (one sentence) for a GPU this build cannot use or a device it cannot place."""
    if device == "cpu":
        return 0
    if device == "auto":
        return ALL_LAYERS if gpu_offload_supported() else 0
    if device in ("cuda", "cuda:0"):
        if not gpu_offload_supported():
            raise ModelError(f"--device {device} asks for a GPU, but this llama-cpp-python was built for the CPU "
                             "only; use --device cpu, or rebuild it with `make llamacpp-setup` on a machine with "
                             "nvcc and a GPU.")
        return ALL_LAYERS
    if device.startswith("cuda:") and device[5:].isdigit():
        raise ModelError(f"llama.cpp places layers on the GPUs it sees, so --device {device} cannot pick one; use "
                         f"--device cuda with CUDA_VISIBLE_DEVICES={device[5:]}.")
    raise ModelError(f"Unknown device {device!r}; use auto, cpu or cuda.")


def gpu_layers_beside(device: torch.device) -> int:
    """Layers a reference row offloads beside goose's model on ``device``: all where that model is on a GPU and
    this build can offload, none where it is on the CPU. A row never asks for a GPU the build cannot use: it runs
    on the CPU and says so (``offload_device``)."""
    return gpu_layers_for("cpu" if device.type == "cpu" else "auto")


def offload_device(gpu_layers: int) -> torch.device:
    """Where a model with ``gpu_layers`` offloaded runs: the GPU when llama.cpp offloads any layer (a build with
    GPU support), else the CPU."""
    if gpu_layers == 0 or not gpu_offload_supported():
        return torch.device("cpu")
    return torch.device(GPU)


def llama_device(device: str) -> torch.device:
    """Where ``--device`` puts a model on llama.cpp (``gpu_layers_for``, then ``offload_device``)."""
    return offload_device(gpu_layers_for(device))


def server_gpu_layers(gpu_layers: int) -> str:
    """``gpu_layers`` as llama-server's ``-ngl`` takes it."""
    return SERVER_ALL_LAYERS if gpu_layers < 0 else str(gpu_layers)
