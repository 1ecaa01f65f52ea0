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

import errno
import hashlib
import json
import os
import shutil
from pathlib import Path

import torch

from drafting.disk_cache import (
    cache_dir,
    cannot_write,
    drop_abandoned,
    made_outside,
    note_damaged,
    note_unwritable,
    temporary_beside,
)
from drafting.models.footprint import check_room
from drafting.models.gguf_stream import NotStreamable, meta_model, streamed_tensors, tied_heads
from drafting.models.safetensors_stream import ShardWriter

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


def is_converted(gguf: Path) -> bool:
    """Whether this process can use a whole conversion of ``gguf`` without converting it."""
    folder = cached_folder(gguf)
    return folder in _OUTSIDE or is_finished(folder)


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
        _OUTSIDE[folder] = made_outside(folder, "goose-gguf-", lambda where: convert_gguf(gguf, where))
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
    from transformers import AutoConfig, AutoTokenizer

    types, weights = gguf_tensors(gguf)
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = meta_model(config)
    try:
        tensors = streamed_tensors(gguf, model)  # one tensor at a time: the load after it needs more
    except NotStreamable:
        check_room(gguf.name, weights, torch.float32, converting=True)
        model, tensors = _whole_model(gguf)
    round_to_bf16 = is_quantised(types) and weights * 4 > exact_up_to_bytes
    writer = ShardWriter(tmp)
    for name, tensor in tensors:
        writer.add(name, tensor.to(storage_dtype(tensor, round_to_bf16)))
    del tensors
    writer.close()
    main_dtype = max(writer.bytes_by_dtype, key=writer.bytes_by_dtype.get)

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(model).__name__]
    config.dtype = main_dtype
    config.save_pretrained(tmp)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(tmp)
    info = {"source": str(gguf), "format": CACHE_FORMAT, "gguf_tensor_types": sorted(types),
            "stored_bytes": {str(k).replace("torch.", ""): v for k, v in sorted(writer.bytes_by_dtype.items(), key=str)},
            "rounded_to_bfloat16": round_to_bf16,
            "file_sizes": {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}}
    (tmp / "goose.json").write_text(json.dumps(info, indent=1))  # last: its presence says the rest is whole


def _whole_model(gguf: Path):
    """transformers' float32 model of the whole file and its tensors to store (a tied head left out), for files
    that cannot be read tensor by tensor."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    heads = tied_heads(model)
    return model, ((name, t) for name, t in model.state_dict().items() if name not in heads)
