"""Where goose keeps what it measured or converted once: ``$GOOSE_CACHE``, else ``~/.cache/goose``."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("GOOSE_CACHE", Path.home() / ".cache" / "goose"))
