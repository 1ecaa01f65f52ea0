"""safetensors files one tensor at a time, so converting or loading a model never holds a second copy of it.

``ShardWriter`` takes tensors as they are made and writes them in shards of at most ``shard_bytes``: the one
file ``model.safetensors`` when they fit in one, else numbered shards and the ``model.safetensors.index.json``
every transformers-folder reader (transformers, vLLM) follows. ``read_tensors`` reads a file's tensors with plain
reads into memory of their own, never a memory map: a map's pages count as the process's resident memory while
the file is open, which was the size of the whole file on top of the model during a load.
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path
from typing import Iterator

import torch

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
SHARD_BYTES = 1024**3  # the embedded model (0.54 GB in float32) stays one file

_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}


def tensor_files(folder: Path) -> list[Path]:
    """The folder's weight files: the shards its index names, else its ``*.safetensors`` files."""
    index = folder / INDEX
    if index.is_file():
        return [folder / name for name in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    return sorted(folder.glob("*.safetensors"))


def read_header(path: Path) -> tuple[dict, int]:
    """The file's header (name -> dtype, shape, data_offsets) and where its data starts."""
    with path.open("rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    return header, 8 + size


def read_tensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Each tensor of the file in the order it is stored, read into memory of its own."""
    header, start = read_header(path)
    with path.open("rb", buffering=0) as f:
        for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
            begin, end = info["data_offsets"]
            dtype = _DTYPES.get(info["dtype"])
            if dtype is None:
                raise ValueError(f"{path.name} stores {name} as {info['dtype']}, which goose cannot read")
            buffer = bytearray(end - begin)
            f.seek(start + begin)
            view = memoryview(buffer)
            done = 0
            while done < len(buffer):
                got = f.readinto(view[done:])
                if not got:
                    raise ValueError(f"{path.name} ends inside {name}")
                done += got
            flat = torch.frombuffer(buffer, dtype=dtype) if buffer else torch.empty(0, dtype=dtype)
            yield name, flat.reshape(info["shape"])


class ShardWriter:
    """Writes the tensors it is given into ``folder`` in shards of at most ``shard_bytes`` (a larger tensor gets
    a shard of its own); ``close`` writes the last one and names the files."""

    def __init__(self, folder: Path, shard_bytes: int | None = None):
        self.folder, self.shard_bytes = folder, shard_bytes or SHARD_BYTES
        self.pending: dict[str, torch.Tensor] = {}
        self.pending_bytes = 0
        self.shards: list[list[str]] = []  # the names in each shard written
        self.bytes_by_dtype: dict[torch.dtype, int] = {}

    def add(self, name: str, tensor: torch.Tensor) -> None:
        size = tensor.numel() * tensor.element_size()
        if self.pending and self.pending_bytes + size > self.shard_bytes:
            self._flush()
        self.pending[name] = tensor.contiguous()
        self.pending_bytes += size
        self.bytes_by_dtype[tensor.dtype] = self.bytes_by_dtype.get(tensor.dtype, 0) + size

    def close(self) -> None:
        if self.pending or not self.shards:
            self._flush()
        if len(self.shards) == 1:
            os.replace(self._path(0), self.folder / SINGLE)
            return
        count = len(self.shards)
        weight_map = {}
        for i, names in enumerate(self.shards):
            final = f"model-{i + 1:05d}-of-{count:05d}.safetensors"
            os.replace(self._path(i), self.folder / final)
            weight_map.update({name: final for name in names})
        total = sum(self.bytes_by_dtype.values())
        (self.folder / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                                                    indent=1))

    def _path(self, i: int) -> Path:
        return self.folder / f"shard-{i:05d}.partial"

    def _flush(self) -> None:
        from safetensors.torch import save_file

        path = self._path(len(self.shards))
        try:
            save_file(self.pending, str(path), metadata={"format": "pt"})
        except Exception as exc:  # safetensors reports a failed write as its own error, the OS's error in its text
            code = re.search(r"\(os error (\d+)\)", str(exc))
            if code is None:
                raise
            raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(path)) from exc
        self.shards.append(list(self.pending))
        self.pending, self.pending_bytes = {}, 0
