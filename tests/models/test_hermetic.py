"""The test run's own goose cache: fresh per session, seen by CLI subprocesses, and the real one watched."""

from __future__ import annotations

import os
import subprocess
import sys

from support.cli import ROOT, cli_env
from conftest import REAL_CACHE, TEST_CACHE, cache_changes, cache_snapshot

from drafting.disk_cache import cache_dir


def test_the_library_uses_the_session_cache():
    assert cache_dir() == TEST_CACHE
    assert TEST_CACHE != REAL_CACHE and not str(TEST_CACHE).startswith(str(REAL_CACHE) + os.sep)


def test_cli_subprocesses_inherit_the_session_cache():
    code = "from drafting.disk_cache import cache_dir; print(cache_dir())"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=cli_env(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(TEST_CACHE)


def test_the_watch_sees_every_kind_of_change(tmp_path):
    root = tmp_path / "cache"
    assert cache_changes(None, cache_snapshot(root)) == []
    root.mkdir()
    assert cache_changes(None, cache_snapshot(root)) == ["the folder itself was created"]
    before = cache_snapshot(root)
    (root / "cost").mkdir()
    (root / "cost" / "a.json").write_text("{}")
    added = cache_snapshot(root)
    assert sorted(cache_changes(before, added)) == ["added cost", "added cost/a.json", "changed ."]
    (root / "cost" / "a.json").write_text('{"x": 1}')
    assert cache_changes(added, cache_snapshot(root)) == ["changed cost/a.json"]
