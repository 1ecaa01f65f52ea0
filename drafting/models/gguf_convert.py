"""Convert a GGUF file once into a standard transformers folder, kept under the cache directory.

The folder is what any tool that reads transformers checkpoints expects (transformers' own
``AutoModelForCausalLM.from_pretrained``, vLLM): ``config.json`` names its architecture, a tied output
embedding is stored once under the input embedding's name, and the generation config and tokenizer sit beside
the weights. Weights are stored in half precision wherever that keeps every value exactly (F16 / BF16 GGUFs),
so a float32 load gives the GGUF's own values; dequantised weights of a large model are rounded to bfloat16,
because their float32 copy would be four bytes per parameter on disk (see ``storage_dtype``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from drafting.disk_cache import cache_dir

# Bump when the folder layout changes: older folders are then rebuilt instead of being trusted.
CACHE_FORMAT = 2
# Dequantised weights keep exact float32 values while the float32 copy stays under this size; above it they are
# rounded to bfloat16 (a relative change of at most 2**-9, far below the quantisation step they already carry).
EXACT_UP_TO_BYTES = 2 * 1024**3
_FLOAT_TYPES = {"F32", "F64"}
_HALF_TYPES = {"F16", "BF16"}


def converted_folder(gguf: Path) -> Path:
    """Where the converted copy of ``gguf`` lives; the key changes with the file and with CACHE_FORMAT."""
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{CACHE_FORMAT}".encode()).hexdigest()[:16]
    return cache_dir() / "gguf" / f"{gguf.stem}-{key}"


def ensure_converted(gguf: Path) -> Path:
    """The converted folder of ``gguf``, converting it first if this is the first use."""
    folder = converted_folder(gguf)
    if not (folder / "goose.json").exists():
        convert_gguf(gguf, folder)
    return folder


def gguf_tensor_types(gguf: Path) -> set[str]:
    """The storage types of the file's tensors (``F32``, ``F16``, ``BF16``, ``Q4_K``, ...), read from its header."""
    from gguf import GGUFReader

    return {t.tensor_type.name for t in GGUFReader(str(gguf)).tensors}


def is_quantised(types: set[str]) -> bool:
    return bool(types - _FLOAT_TYPES - _HALF_TYPES)


def storage_dtype(tensor: torch.Tensor, round_to_bf16: bool) -> torch.dtype:
    """float16 or bfloat16 when the tensor survives the trip through it unchanged, else bfloat16 for a matrix
    when ``round_to_bf16`` (a large dequantised model), else float32 (norms and biases always keep theirs)."""
    if not tensor.is_floating_point():
        return tensor.dtype
    for half in (torch.bfloat16, torch.float16):
        if torch.equal(tensor.to(half).to(tensor.dtype), tensor):
            return half
    if round_to_bf16 and tensor.dim() >= 2:
        return torch.bfloat16
    return torch.float32


def _tensors_to_store(model) -> dict[str, torch.Tensor]:
    """The state dict under transformers' names, a tied output embedding left out: loaders tie it again from
    the input embedding (vLLM skips ``lm_head`` when the config says tied, so it must not be the only copy)."""
    state = model.state_dict()
    out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
    if out_emb is None or in_emb is None or out_emb.weight is not in_emb.weight:
        return state
    heads = {f"{name}.weight" for name, module in model.named_modules(remove_duplicate=False) if module is out_emb}
    return {name: tensor for name, tensor in state.items() if name not in heads}


def convert_gguf(gguf: Path, folder: Path, exact_up_to_bytes: int = EXACT_UP_TO_BYTES) -> None:
    """De-quantise ``gguf`` and save it at ``folder`` as a standard transformers folder (written aside first,
    then renamed, so an interrupted conversion never leaves a folder that looks finished)."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    types = gguf_tensor_types(gguf)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tensors = _tensors_to_store(model)
    float32_bytes = sum(t.numel() * 4 for t in tensors.values() if t.is_floating_point())
    round_to_bf16 = is_quantised(types) and float32_bytes > exact_up_to_bytes
    stored = {name: t.to(storage_dtype(t, round_to_bf16)).contiguous() for name, t in tensors.items()}
    by_dtype: dict[torch.dtype, int] = {}
    for t in stored.values():
        by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + t.numel() * t.element_size()
    main_dtype = max(by_dtype, key=by_dtype.get)

    tmp = folder.with_name(folder.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(model).__name__]
    config.dtype = main_dtype
    config.save_pretrained(tmp)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    save_file(stored, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    info = {"source": str(gguf), "format": CACHE_FORMAT, "gguf_tensor_types": sorted(types),
            "stored_bytes": {str(k).replace("torch.", ""): v for k, v in sorted(by_dtype.items(), key=str)},
            "rounded_to_bfloat16": round_to_bf16}
    (tmp / "goose.json").write_text(json.dumps(info, indent=1))
    if folder.exists():  # an unfinished or stale folder of the same key
        import shutil

        shutil.rmtree(folder)
    tmp.replace(folder)
