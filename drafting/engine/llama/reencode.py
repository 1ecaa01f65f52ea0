"""A GGUF file's weights re-encoded as Q8_0, once, for the llama.cpp engine (``--weights q8_0``).

llama.cpp's CPU kernels are not equally quick for every weight type: on x86, Q4_1 (the embedded model's type) has
neither a repacked nor a tinyBLAS (llamafile) kernel, so each batch row costs a whole pass of dot products. Q8_0
has both, so its prefill and its wider passes are quicker, while one-token steps cost about the same
(docs/llama-cpp.md has the measured curves; a Q4_K file has fast kernels of its own and loses). Q8_0 holds a
4-to-6-bit file's values to within 1/254 of each 32-weight block's largest value, a small fraction of the step
those files were already rounded to, so outputs are the file's own up to near-ties; they are not the same
numbers, which is why it is only used when asked for, like int8 on the transformers engine.

The copy is written by llama.cpp's own quantiser into a temporary file beside its place in goose's cache and
renamed there whole (a crash never leaves a file that looks finished). A cache that cannot be written gets
nothing: the copy goes to a temporary folder for this process, and one line says so. A file whose weights are
8 bits or more (Q8_0, F16, BF16, F32) is refused: re-encoding would round it, or gain nothing.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import sys
from pathlib import Path

from drafting.disk_cache import (
    cache_dir, cannot_write, drop_abandoned, made_outside, note_unwritable, replaced_when_done,
)
from drafting.engine.llama.net import last_complaint, llama_lib
from drafting.errors import ModelError

Q8_0 = "q8_0"
FORMATS = (Q8_0,)  # what --weights takes on the llama.cpp engine besides auto (the file's own weights)
_FTYPE_Q8_0 = 7  # LLAMA_FTYPE_MOSTLY_Q8_0
WIDE_TYPES = ("Q8_0", "F16", "BF16", "F32")  # files of 8 bits a weight or more
_OUTSIDE: dict[Path, Path] = {}  # cache path -> this process's copy outside a cache it could not write


def reencoded_path(gguf: Path) -> Path:
    """Where the Q8_0 copy of ``gguf`` lives in the cache: the key changes with the file and llama.cpp's version."""
    stat = gguf.stat()
    version = getattr(llama_lib(), "__version__", "?")
    key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{version}".encode()).hexdigest()[:16]
    return cache_dir() / "gguf-q8_0" / f"{gguf.stem}-{key}.gguf"


def file_type(gguf: Path) -> str:
    """The file's weight type from its header (``Q4_1``, ``Q4_K_M``; ``unknown`` where it does not say), read
    without loading weights."""
    import gguf as gguf_format  # only its enum of file types; kept out of the engine's import time

    lib = llama_lib()
    params = lib.llama_model_default_params()
    params.vocab_only = True
    model = lib.llama_model_load_from_file(str(gguf).encode(), params)
    if not model:
        raise ModelError(f"llama.cpp could not read {gguf.name}: {last_complaint() or 'not a model it reads'}.")
    try:
        buf = ctypes.create_string_buffer(64)
        found = lib.llama_model_meta_val_str(model, b"general.file_type", buf, len(buf)) > 0
    finally:
        lib.llama_model_free(model)
    try:
        kind = gguf_format.LlamaFileType(int(buf.value) & ~int(gguf_format.LlamaFileType.GUESSED))
    except ValueError:
        return "unknown"
    return kind.name.removeprefix("MOSTLY_").removeprefix("ALL_") if found else "unknown"


def as_q8_0(gguf: Path, kind: str | None = None) -> Path:
    """The Q8_0 copy of ``gguf`` (whose ``file_type`` is ``kind``, read when not given), made on first use;
    ModelError (one sentence) for a file it would not help."""
    kind = kind or file_type(gguf)
    if kind in WIDE_TYPES:
        raise ModelError(f"--weights q8_0 re-encodes files of fewer than 8 bits a weight, and {gguf.name} holds {kind} "
                         "weights; leave --weights auto.")
    path = reencoded_path(gguf)
    if path in _OUTSIDE:
        return _OUTSIDE[path]
    if path.is_file():
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        drop_abandoned(path)
        with replaced_when_done(path) as tmp:
            _quantise(gguf, tmp, kind)
        return path
    except OSError as exc:
        if not cannot_write(exc):
            raise
        note_unwritable(path.parent, exc, "the Q8_0 copy is written to a temporary folder and not kept (set "
                                          "GOOSE_CACHE to a writable folder)")
    _OUTSIDE[path] = made_outside(path, "goose-q8_0-", lambda where: _quantise(gguf, where, kind))
    return _OUTSIDE[path]


def _quantise(gguf: Path, out: Path, kind: str) -> None:
    print(f"goose: re-encoding {gguf.name} ({kind}) as Q8_0, once ({out.parent})", file=sys.stderr, flush=True)
    lib = llama_lib()
    params = lib.llama_model_quantize_default_params()
    params.ftype = _FTYPE_Q8_0
    params.allow_requantize = True  # the file is quantised already: its values are dequantised, then re-encoded
    params.nthread = max(1, min(4, os.cpu_count() or 1))
    need = gguf.stat().st_size * 9 // 4  # Q8_0 is 8.5 bits a weight; the files it helps hold 4 to 6
    free = shutil.disk_usage(out.parent).free
    if need > free:
        raise ModelError(f"The Q8_0 copy of {gguf.name} needs about {need / 1e9:.1f} GB of disk and {out.parent} has "
                         f"{free / 1e9:.1f} GB free; free some space or set GOOSE_CACHE elsewhere.")
    rc = lib.llama_model_quantize(str(gguf).encode(), str(out).encode(), ctypes.byref(params))
    if rc != 0:
        raise ModelError(f"llama.cpp could not re-encode {gguf.name} as Q8_0: {last_complaint() or f'error {rc}'}.")
