"""Convert a GGUF file once into a standard transformers folder, kept under the cache directory.

The folder is what any tool that reads transformers checkpoints expects (transformers' own
``AutoModelForCausalLM.from_pretrained``, vLLM): ``config.json`` names its architecture, a tied output
embedding is stored once under the input embedding's name, and the generation config and tokenizer sit beside
the weights. Weights are stored in half precision wherever that keeps every value exactly (F16 / BF16 GGUFs),
so a float32 load gives the GGUF's own values; dequantised weights of a large model are rounded to bfloat16,
because their float32 copy would be four bytes per parameter on disk (see ``storage_dtype``).

A conversion is written into a temporary folder of its own process and renamed into place whole, so a crash
never leaves a folder that looks finished, and two processes converting one file at once both succeed: the one
that renames second finds a finished folder there and drops its own copy. A cache that cannot be written (read
only, full) gets nothing: the model is converted into a temporary folder outside it for this process, and one
line says so.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import torch

from drafting.disk_cache import (
    cache_dir,
    cannot_write,
    drop_abandoned,
    note_damaged,
    note_unwritable,
    temporary_beside,
)
from drafting.models.footprint import check_room

# Bump when the folder layout changes: older folders are then rebuilt instead of being trusted.
CACHE_FORMAT = 2
# Dequantised weights keep exact float32 values while the float32 copy stays under this size; above it they are
# rounded to bfloat16 (a relative change of at most 2**-9, far below the quantisation step they already carry).
EXACT_UP_TO_BYTES = 2 * 1024**3
_FLOAT_TYPES = {"F32", "F64"}
_HALF_TYPES = {"F16", "BF16"}


_OUTSIDE: dict[Path, Path] = {}  # cache folder -> this process's copy outside a cache it could not write


def cached_folder(gguf: Path) -> Path:
    """Where the converted copy of ``gguf`` lives in the cache; the key changes with the file and with CACHE_FORMAT."""
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{CACHE_FORMAT}".encode()).hexdigest()[:16]
    return cache_dir() / "gguf" / f"{gguf.stem}-{key}"


def converted_folder(gguf: Path) -> Path:
    """Where the converted copy of ``gguf`` is: in the cache, or this process's own copy where the cache could not
    take one."""
    folder = cached_folder(gguf)
    return _OUTSIDE.get(folder, folder)


def is_finished(folder: Path) -> bool:
    """Whether ``folder`` is a whole conversion: its record (written last) is today's, and every file it lists has
    the size it was written with (records older than the sizes list only need the config and the weights)."""
    try:
        info = json.loads((folder / "goose.json").read_text())
        if not isinstance(info, dict) or info.get("format") != CACHE_FORMAT:
            return False
        sizes = info.get("file_sizes") or {"config.json": None, "model.safetensors": None}
        return all(size is None or (folder / name).stat().st_size == size for name, size in sizes.items()) and all(
            (folder / name).is_file() for name in sizes)
    except (OSError, ValueError, TypeError, AttributeError):
        return False


def ensure_converted(gguf: Path) -> Path:
    """The converted folder of ``gguf``, converting it first if this is the first use (or the folder there is not
    a whole conversion)."""
    folder = cached_folder(gguf)
    if folder in _OUTSIDE:
        return _OUTSIDE[folder]
    if is_finished(folder):
        return folder
    if os.path.lexists(folder):
        note_damaged(folder, "an unfinished or damaged conversion")
    try:
        convert_gguf(gguf, folder)
    except OSError as exc:
        if not cannot_write(exc):
            raise
        note_unwritable(folder.parent, exc, "the model is converted into a temporary folder and nothing is cached "
                                            "this run (set GOOSE_CACHE to a writable folder)")
        outside = Path(tempfile.mkdtemp(prefix="goose-gguf-"))
        atexit.register(shutil.rmtree, outside, True)
        convert_gguf(gguf, outside / folder.name)
        _OUTSIDE[folder] = outside / folder.name
        return _OUTSIDE[folder]
    return folder


def gguf_tensors(gguf: Path) -> tuple[set[str], int]:
    """The storage types of the file's tensors (``F32``, ``F16``, ``BF16``, ``Q4_K``, ...) and how many weights
    they hold, read from its header."""
    from gguf import GGUFReader

    tensors = GGUFReader(str(gguf)).tensors
    return {t.tensor_type.name for t in tensors}, sum(int(t.n_elements) for t in tensors)


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
    """De-quantise ``gguf`` and save it at ``folder`` as a standard transformers folder: written into a
    temporary folder of this process beside it, then renamed into place (where another process put a whole
    conversion there first, that one stays and this copy is dropped)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    drop_abandoned(folder)
    tmp = temporary_beside(folder, folder=True)
    try:
        _write_conversion(gguf, tmp, exact_up_to_bytes)
        _move_into_place(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when it was renamed


def _move_into_place(tmp: Path, folder: Path) -> None:
    for _ in range(3):
        try:
            os.rename(tmp, folder)  # replaces an empty folder; a full one refuses
            return
        except OSError as exc:
            if not os.path.isdir(folder):
                raise
            if is_finished(folder):
                return  # another process converted it first: keep its folder
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
        stale = temporary_beside(folder, folder=True)  # a damaged folder: moved aside whole, then removed
        try:
            os.rename(folder, stale / "old")
        except FileNotFoundError:
            pass  # another process moved it already
        shutil.rmtree(stale, ignore_errors=True)
    raise OSError(errno.EEXIST, "another conversion keeps replacing it", str(folder))


def _write_conversion(gguf: Path, tmp: Path, exact_up_to_bytes: int) -> None:
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    types, weights = gguf_tensors(gguf)
    check_room(gguf.name, weights, torch.float32, converting=True)
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

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(model).__name__]
    config.dtype = main_dtype
    config.save_pretrained(tmp)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        save_file(stored, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    except Exception as exc:  # safetensors reports a failed write as its own error, with the OS's error in its text
        code = re.search(r"\(os error (\d+)\)", str(exc))
        if code is None:
            raise
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(tmp)) from exc
    info = {"source": str(gguf), "format": CACHE_FORMAT, "gguf_tensor_types": sorted(types),
            "stored_bytes": {str(k).replace("torch.", ""): v for k, v in sorted(by_dtype.items(), key=str)},
            "rounded_to_bfloat16": round_to_bf16,
            "file_sizes": {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}}
    (tmp / "goose.json").write_text(json.dumps(info, indent=1))  # last: its presence says the rest is whole
