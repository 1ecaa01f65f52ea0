"""Where goose keeps what it measured or converted once (``$GOOSE_CACHE``, else ``~/.cache/goose``), and the one
keyed JSON cache its timings share (cost curves, weight-format probes, MKL's few-row split).

An entry lives at ``<cache>/<kind>/<hash of its key>.json``; the key is a string or a JSON-able dict (hashed with
sorted keys), so what decides a timing (machine, model, dtype, ...) decides its file. Writes go to a temporary file
of their own and replace the entry in one step, so two processes writing the same entry never leave a mix of both,
and a reader sees the old entry or the new one. A file that is not an entry (empty, truncated, another shape) reads
as absent and is measured and written again. The cache is a convenience: a folder that cannot be written is
ignored, never a failed run.

Timings taken while other processes held the cores are not this machine's speed. ``busy_ttl_s`` says what happens
to them: 0 (most kinds) keeps them out of the cache; more keeps them that many seconds (so a burst of runs on a
busy machine does not measure every time), and never in place of an entry still good to read.

A leaf module: it imports nothing of goose's, so every layer may use it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")

WRITTEN = "written"  # when the entry was written (seconds since the epoch)
BUSY = "busy"  # present and true when the entry was measured on a busy machine


def cache_dir() -> Path:
    return Path(os.environ.get("GOOSE_CACHE", Path.home() / ".cache" / "goose"))


def key_hash(key: str | dict) -> str:
    """The file name (without ``.json``) of ``key``: 16 hex digits of its SHA-256 (a dict as JSON, keys sorted)."""
    text = key if isinstance(key, str) else json.dumps(key, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class DiskCache:
    """The entries of one kind: JSON objects under ``cache_dir() / kind``, one file per key. ``parse(doc, key)``
    turns a stored object into what the kind holds, or None where it is not a good entry for ``key``."""

    def __init__(self, kind: str, parse: Callable[[dict, str | dict], T | None] | None = None,
                 busy_ttl_s: float = 0.0):
        self.kind = kind
        self.parse = parse or (lambda doc, key: doc)
        self.busy_ttl_s = busy_ttl_s

    def path(self, key: str | dict) -> Path:
        return cache_dir() / self.kind / f"{key_hash(key)}.json"

    def read(self, key: str | dict):
        """The entry of ``key`` as ``parse`` makes it (from the stored object less the cache's own fields); None
        when there is none, it is not a JSON object, it was measured on a busy machine more than ``busy_ttl_s``
        ago, or ``parse`` rejects it (returns None, or raises ValueError, TypeError, KeyError, IndexError or
        AttributeError on a malformed one)."""
        try:
            doc = json.loads(self.path(key).read_text())
            if not isinstance(doc, dict):
                return None
            written = float(doc.pop(WRITTEN, 0) or 0)
            if doc.pop(BUSY, False) and time.time() - written > self.busy_ttl_s:
                return None
            return self.parse(doc, key)
        except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
            return None

    def write(self, key: str | dict, value: dict, busy: bool = False) -> None:
        """Store ``value`` (a JSON object) as the entry of ``key``. Measured on a busy machine (``busy``): not
        stored where ``busy_ttl_s`` is 0, and never in place of an entry still good to read."""
        if busy and (self.busy_ttl_s <= 0 or self.read(key) is not None):
            return
        path = self.path(key)
        doc = {**value, WRITTEN: time.time(), **({BUSY: True} if busy else {})}
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{path.stem}.", suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(doc, indent=1))
            os.replace(tmp, path)
        except OSError:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
