"""An installed distribution on disk, as pip leaves one, for tests of goose's packaged models."""

from __future__ import annotations


def fake_distribution(site, name: str, files: dict[str, bytes]) -> None:
    """An installed distribution on disk (dist-info + files), as pip leaves one, found by importlib.metadata."""
    dist = site / f"{name.replace('-', '_')}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    (dist / "RECORD").write_text("".join(f"{rel},,\n" for rel in files))
