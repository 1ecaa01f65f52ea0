"""The model the engine runs: the network, its tokenizer, the engine that runs it and what the loader learned."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from drafting.engine.forward import TRANSFORMERS


@dataclass
class LoadedModel:
    model: object  # the network its engine runs: a torch.nn.Module (transformers), a LlamaNet (llama.cpp)
    tokenizer: object
    name: str
    device: torch.device
    dtype: torch.dtype
    eos_ids: set[int] = field(default_factory=set)
    max_context: int = 2048
    sliding_window: int | None = None
    weights: str = "float"  # weight format applied at load time (drafting.weights.formats)
    gguf: Path | None = None  # the GGUF file the weights were converted from, if any
    mode_choice: object = None  # drafting.weights.probe.FormatChoice when --weights auto measured the choice
    # how caches of this model's timings tell its weight format apart (drafting.weights.formats.format_key,
    # recorded by the loader: mkl adds its few-row split); None: the format's name
    weights_key: str | None = None
    # the measured verify cost curves tree budgets read (drafting.machine.verify_cost), supplied by the layer that
    # knows the machine; None: nothing measured, so ``budget=auto`` speculators draft their whole candidate tree
    verify_cost: Callable[[], object] | None = field(default=None, repr=False)
    engine: str = TRANSFORMERS  # one of drafting.engine.forward.ENGINES
    # make_forward(lm, static_shapes) -> the engine's Forward (drafting.engine.forward), set by the loader
    make_forward: Callable[..., object] | None = field(default=None, repr=False)

    @property
    def vocab_size(self) -> int:
        if not isinstance(self.model, torch.nn.Module):
            return int(self.model.n_vocab)  # another engine's network states it
        head = self.model.get_output_embeddings()
        out = getattr(head, "out_features", None)  # quantised heads have no plain .weight tensor
        return int(out if out is not None else head.weight.shape[0])

    @property
    def mode(self) -> str:
        if self.engine != TRANSFORMERS:  # its own kernels on the file's weights: the engine and the weights' type
            return f"{self.engine} {self.weights}"
        return mode_name(str(self.dtype).replace("torch.", ""), self.weights)

    @property
    def engine_mode(self) -> str:
        """What runs it, as the faces name it: ``transformers float32``, ``llama.cpp Q4_1``."""
        return self.mode if self.engine != TRANSFORMERS else f"{self.engine} {self.mode}"

    def describe(self) -> str:
        if self.engine != TRANSFORMERS:
            return f"{self.name} on {self.mode} ({self.device.type})"
        return f"{self.name} on {self.device.type} ({self.mode})"


def mode_name(dtype: str, weights: str) -> str:
    """A mode is a dtype and a weight format, named ``float32`` (float weights) or ``bfloat16+int8``."""
    return dtype if weights == "float" else f"{dtype}+{weights}"
