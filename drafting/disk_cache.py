"""Where goose keeps what it measured or converted once (``$GOOSE_CACHE``, else ``~/.cache/goose``), and the one
keyed JSON cache its timings share (cost curves, weight-format probes, MKL's few-row split).

An entry lives at ``<cache>/<kind>/<hash of its key>.json``; the key is a string or a JSON-able dict (hashed with
sorted keys), so what decides a timing (machine, model, dtype, ...) decides its file. Writes go to a temporary file
of their own and replace the entry in one step, so two processes writing the same entry never leave a mix of both,
and a reader sees the old entry or the new one. A file that is not an entry (empty, truncated, another shape) reads
as absent, is removed, and is measured and written again. The cache is a convenience: a folder that cannot be
written is ignored, never a failed run.

Every cache of goose (these entries, the converted GGUF folders, the assembled packaged GGUFs, adjacency tables)
tells the user in one line on stderr, once per process, that it found a damaged file (``note_damaged``) or could
not write (``note_unwritable``); ``temporary_beside``, ``replaced_when_done`` and ``drop_abandoned`` name,
rename into place and clear the temporaries they write.

Timings taken while other processes held the cores are not this machine's speed. ``busy_ttl_s`` says what happens
to them: 0 (most kinds) keeps them out of the cache; more keeps them that many seconds (so a burst of runs on a
busy machine does not measure every time), and never in place of an entry still good to read.

A leaf module: it imports nothing of goose's, so every layer may use it.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")

WRITTEN = "written"  # when the entry was written (seconds since the epoch)
BUSY = "busy"  # present and true when the entry was measured on a busy machine


def cache_dir() -> Path:
    return Path(os.environ.get("GOOSE_CACHE", Path.home() / ".cache" / "goose"))


_SAID: set[str] = set()  # what this process has told the user about its caches
# errors that say the cache cannot take a write, as opposed to a fault of what is being written; ENOENT and
# ENOTDIR: a cache folder that cannot be made at all (below a file, in /proc)
CANNOT_WRITE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOENT, errno.ENOTDIR}


def say_once(topic: str, text: str) -> None:
    """Print ``goose: text`` on stderr, the first time this process has something to say about ``topic``."""
    if topic not in _SAID:
        _SAID.add(topic)
        print(f"goose: {text}", file=sys.stderr, flush=True)


def note_damaged(path, why: str) -> None:
    say_once("damaged", f"the cache entry {path} is damaged ({why}); goose ignores it and writes a new one.")


def note_unwritable(where, exc: OSError, consequence: str = "goose runs without caching") -> None:
    say_once("unwritable", f"cannot write the cache {where} ({exc.strerror or exc}), so {consequence}.")


def cannot_write(exc: OSError) -> bool:
    return exc.errno in CANNOT_WRITE


def _owner() -> str:
    return f"{os.getpid()}@{socket.gethostname()}"


def temporary_beside(path: Path, folder: bool = False) -> Path:
    """A new temporary file (or folder) of this process next to ``path``, to be renamed onto it when whole; its
    name says whose it is, so ``drop_abandoned`` can clear one a crashed process left."""
    prefix, suffix = f"{path.name}.{_owner()}.", ".tmp"
    if folder:
        return Path(tempfile.mkdtemp(dir=path.parent, prefix=prefix, suffix=suffix))
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=suffix)
    os.close(fd)
    return Path(name)


@contextmanager
def replaced_when_done(path: Path):
    """Yield a temporary file of this process beside ``path`` to write; renamed onto ``path`` when the block ends
    without an error, removed when it raises, so no reader ever finds a part-written file under the real name."""
    tmp = temporary_beside(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def made_outside(entry: Path, prefix: str, make: Callable[[Path], None]) -> Path:
    """For a cache entry the cache could not take: ``make(path)`` writes it into a new temporary folder of this
    process instead (removed when the process ends), under the entry's own name; that path is returned."""
    outside = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, outside, True)
    make(outside / entry.name)
    return outside / entry.name


def drop_abandoned(path: Path) -> None:
    """Remove the temporaries of ``path`` whose process (on this host) is gone."""
    host = socket.gethostname()
    try:
        found = list(path.parent.glob(f"{path.name}.*@*.tmp"))
    except OSError:
        return
    for tmp in found:
        pid, _, rest = tmp.name[len(path.name) + 1:].partition("@")
        if not pid.isdigit() or not rest.startswith(f"{host}.") or _alive(int(pid)):
            continue
        try:
            shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
        except OSError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process
    return True


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
        when there is none, it was measured on a busy machine more than ``busy_ttl_s`` ago, or ``parse`` finds it
        is not for ``key`` (returns None). A damaged file (not JSON, not an object, or one ``parse`` raises
        ValueError, TypeError, KeyError, IndexError or AttributeError on) is removed and reads as absent."""
        path = self.path(key)
        try:
            text = path.read_text()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError) as exc:  # unreadable, or not text
            note_damaged(path, getattr(exc, "strerror", None) or "not text")
            return None
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict):
                raise TypeError(f"a JSON {type(doc).__name__}, not an object")
            written = float(doc.pop(WRITTEN, 0) or 0)
            if doc.pop(BUSY, False) and time.time() - written > self.busy_ttl_s:
                return None
            return self.parse(doc, key)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            note_damaged(path, _why(exc))
            try:
                path.unlink()  # so a run that measures but may not store (a busy machine) does not trip on it again
            except OSError:
                pass
            return None

    def write(self, key: str | dict, value: dict, busy: bool = False) -> None:
        """Store ``value`` (a JSON object) as the entry of ``key``. Measured on a busy machine (``busy``): not
        stored where ``busy_ttl_s`` is 0, and never in place of an entry still good to read."""
        if busy and (self.busy_ttl_s <= 0 or self.read(key) is not None):
            return
        path = self.path(key)
        doc = {**value, WRITTEN: time.time(), **({BUSY: True} if busy else {})}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with replaced_when_done(path) as tmp:
                tmp.write_text(json.dumps(doc, indent=1))
        except OSError as exc:
            note_unwritable(cache_dir(), exc, "goose runs without caching (set GOOSE_CACHE to a writable folder)")


def _why(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return "not JSON, or cut short"
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]!r}" if exc.args else "a field missing"
    return str(exc).split("\n")[0] or type(exc).__name__
