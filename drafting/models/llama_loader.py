"""Load a GGUF model on the llama.cpp engine: llama.cpp's own kernels on the file's own weights (or, when asked,
on a Q8_0 copy of them: drafting.engine.llama.reencode), and the same tokenizer (and so the same token ids) as the
transformers engine. The peak memory is about the file, its KV cache and one batch of logits."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from drafting.engine.forward import LLAMA_CPP
from drafting.engine.llama import llama_forward
from drafting.engine.llama.net import LlamaNet, llama_lib
from drafting.engine.llama.offload import gpu_layers_for, offload_device
from drafting.engine.llama.reencode import FORMATS, Q8_0, as_q8_0, file_type
from drafting.engine.llama.settings import LlamaSettings
from drafting.engine.loaded_model import LoadedModel
from drafting.errors import ModelError, first_line
from drafting.machine.verify_cost import with_verify_cost
from drafting.models.gguf_tokenizer import gguf_tokenizer


def load_llama(name: str, gguf: Path | str, device: str = "auto", dtype: str = "auto", weights: str = "auto",
               settings: LlamaSettings | None = None) -> LoadedModel:
    """``gguf`` (from drafting.models.loader.model_source) on llama.cpp; ModelError (one sentence) for what it
    cannot run: a transformers folder or hub id, a recurrent model, a dtype or weight format of the other engine."""
    if not (isinstance(gguf, Path) and gguf.suffix == ".gguf"):
        kind = "folder" if isinstance(gguf, Path) else "hub id"
        raise ModelError(f"The llama.cpp engine runs GGUF files, and {name!r} is a transformers {kind}; give a .gguf "
                         "file or use --engine transformers.")
    if dtype not in ("auto", "float32"):
        raise ModelError(f"--dtype {dtype} is a transformers engine option; llama.cpp computes with the GGUF's own "
                         "weight types (leave --dtype auto).")
    if weights not in ("auto", *FORMATS):
        raise ModelError(f"--weights {weights} is a transformers engine option; on llama.cpp use auto (the GGUF's own "
                         f"weights) or {Q8_0} (a Q8_0 copy of them).")
    base = settings or LlamaSettings()
    if settings is None or device != "auto":  # the device asked for decides the offload
        base = replace(base, gpu_layers=gpu_layers_for(device))
    try:
        tokenizer = gguf_tokenizer(gguf)
    except Exception as exc:  # transformers raises many kinds; the user needs one sentence
        raise ModelError(f"Could not read the tokenizer of {name!r}: {first_line(exc)}") from exc
    weights_file, origin = gguf, ""
    if weights == Q8_0:
        kind = file_type(gguf)
        origin = f" from {kind}"
        weights_file = as_q8_0(gguf, kind)
    net = LlamaNet(weights_file, base)
    eos = {net.eos} if net.eos >= 0 else set()
    if getattr(tokenizer, "eos_token_id", None) is not None:
        eos.add(int(tokenizer.eos_token_id))
    lib = llama_lib()
    build = lib.llama_print_system_info().decode("utf-8", "replace").strip()
    runs_on = offload_device(base.gpu_layers)
    where = f"{base.gpu_layers} GPU layers" if runs_on.type != "cpu" else "cpu"
    return with_verify_cost(LoadedModel(
        model=net,
        tokenizer=tokenizer,
        name=name,
        device=runs_on,  # where its layers run (its logits land on the host either way)
        dtype=torch.float32,
        eos_ids=eos,
        max_context=net.n_ctx,
        weights=net.file_type() + origin,
        gguf=gguf,  # the file given: what llama.cpp's own reference rows run, as its user would
        # what decides its cost curve: the weights' type, threads, offload and the build (version, CPU features)
        weights_key=f"{net.file_type()}|{base.thread_count} threads|{where}|{lib.__version__}|{build}",
        engine=LLAMA_CPP,
        make_forward=llama_forward,
    ))
