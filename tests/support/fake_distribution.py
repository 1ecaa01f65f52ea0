"""An installed distribution on disk, as pip leaves one, for tests of goose's packaged models."""

from __future__ import annotations

import hashlib
import importlib

from drafting.models.packaged import PackagedModel


def fake_distribution(site, name: str, files: dict[str, bytes]) -> None:
    """An installed distribution on disk (dist-info + files), as pip leaves one, found by importlib.metadata."""
    dist = site / f"{name.replace('-', '_')}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    (dist / "RECORD").write_text("".join(f"{rel},,\n" for rel in files))


def install_chunked_model(tmp_path, monkeypatch, name: str, chunks: list[bytes]) -> PackagedModel:
    """A packaged GGUF split over one distribution per chunk (plus one with its SHA256SUMS), installed under
    ``tmp_path`` with a goose cache of its own, as the real chunk packages are laid out."""
    site = tmp_path / "site"
    sums = f"{hashlib.sha256(b''.join(chunks)).hexdigest()}  tiny.gguf\n".encode()
    module = name.replace("-", "_")
    fake_distribution(site, name, {f"{module}/data/SHA256SUMS": sums})
    for i, data in enumerate(chunks):
        fake_distribution(site, f"{name}-part{i}", {f"{module}_part{i}/data/tiny.gguf.part0{i}": data})
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path / "cache"))
    importlib.invalidate_caches()
    return PackagedModel("Tiny", name, f"pip install {name}", tuple(f"{name}-part{i}" for i in range(len(chunks))))
