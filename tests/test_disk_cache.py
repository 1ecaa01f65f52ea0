"""The keyed JSON cache every timing of goose shares (drafting.disk_cache): a file that is not an entry reads as
absent and is replaced, two processes writing one entry never leave a mix, busy-machine entries follow the kind's
rule, and the keys (file names) are those caches were written under before, so they stay valid."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from support.cli import ROOT, cli_env

from drafting.disk_cache import DiskCache, cache_dir, key_hash


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    return DiskCache("test-kind")


def test_an_entry_is_read_back_as_written(cache, tmp_path):
    cache.write({"model": "m", "n": 1}, {"a": [1, 2], "b": "x"})
    assert cache.read({"n": 1, "model": "m"}) == {"a": [1, 2], "b": "x"}  # dict keys: order does not matter
    assert cache.path({"model": "m", "n": 1}).parent == tmp_path / "test-kind"
    assert cache.read({"model": "m", "n": 2}) is None
    cache.write("a string key", {"v": 3})
    assert cache.read("a string key") == {"v": 3}


@pytest.mark.parametrize("text", ["[]", "", '{"a": [1, 2', "null", '"text"', "\x00\xff garbage", '{"a": 1}'])
def test_a_file_that_is_not_an_entry_reads_as_absent_and_is_replaced(cache, text):
    def parse(doc, key):  # the kind's schema: an object with a list "a"
        return list(doc["a"])

    kind = DiskCache("test-kind", parse=parse)
    path = kind.path("k")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    assert kind.read("k") is None
    kind.write("k", {"a": [4, 5]})
    assert kind.read("k") == [4, 5]
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind


def test_parse_may_refuse_an_entry_for_its_key(cache):
    kind = DiskCache("test-kind", parse=lambda doc, key: doc if doc.get("for") == key else None)
    kind.write({"x": 1}, {"for": {"x": 2}})
    assert kind.read({"x": 1}) is None


def test_busy_entries_are_not_kept_unless_the_kind_keeps_them_a_while(cache):
    cache.write("k", {"v": "busy"}, busy=True)
    assert cache.read("k") is None and not cache.path("k").exists()  # busy_ttl_s 0: never stored
    kept = DiskCache("test-kind", busy_ttl_s=60)
    kept.write("k", {"v": "idle"})
    kept.write("k", {"v": "busy"}, busy=True)
    assert kept.read("k") == {"v": "idle"}  # never in place of an entry still good to read
    kept.path("k").unlink()
    kept.write("k", {"v": "busy"}, busy=True)
    assert kept.read("k") == {"v": "busy"}
    doc = json.loads(kept.path("k").read_text())
    doc["written"] -= 61
    kept.path("k").write_text(json.dumps(doc))
    assert kept.read("k") is None  # expired: measured again
    kept.write("k", {"v": "busy again"}, busy=True)
    assert kept.read("k") == {"v": "busy again"}  # and an expired one may be replaced
    kept.write("k", {"v": "idle"})
    assert kept.read("k") == {"v": "idle"}  # an idle entry always replaces


def test_an_unwritable_cache_is_ignored(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("GOOSE_CACHE", str(blocker))
    DiskCache("test-kind").write("k", {"v": 1})  # no error: the cache is a convenience
    assert DiskCache("test-kind").read("k") is None


ROWS = 3000  # a value of about a hundred kilobytes: a write takes a while
WRITER = f"""
import sys
from drafting.disk_cache import DiskCache
cache, tag = DiskCache("race"), sys.argv[1]
value = {{"tag": tag, "payload": [tag * 50] * {ROWS}}}
for _ in range(int(sys.argv[2])):
    cache.write("one key", value)
"""


def test_two_writers_never_corrupt_an_entry(tmp_path):
    env = {**cli_env(), "GOOSE_CACHE": str(tmp_path)}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, tag, "150"], cwd=ROOT, env=env)
               for tag in ("a", "b")]
    path = tmp_path / "race" / f"{key_hash('one key')}.json"
    seen, bad = set(), []
    while any(w.poll() is None for w in writers):
        if path.exists():
            try:
                doc = json.loads(path.read_text())
                seen.add(doc["tag"])
                if doc["payload"] != [doc["tag"] * 50] * ROWS:
                    bad.append("a mix of two writes")
            except (ValueError, KeyError) as exc:
                bad.append(repr(exc))
        time.sleep(0.001)
    assert [w.returncode for w in writers] == [0, 0]
    assert not bad, bad[:3]
    assert seen <= {"a", "b"}
    doc = json.loads(path.read_text())
    assert doc["payload"] == [doc["tag"] * 50] * ROWS
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_keys_are_the_file_names_caches_were_written_under(tmp_path, monkeypatch):
    """The hashes of the three timing caches, as goose named their files before they shared this cache: a
    change here makes every user's cached curves, probes and splits be measured again."""
    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path
    # cost curves: the key text (model|device|dtype|threads|prefix, and the weight format's key unless float)
    assert key_hash("tiny|cpu|torch.float32|1|256") == "e437d7b2a22e843b"
    assert key_hash("tiny|cpu|torch.float32|1|256|mkl|torch 32x48<=4") == "76d6579e66f6fe18"
    # weight-format probes: the fingerprint as JSON, keys sorted
    assert key_hash({"probe": 2, "cpu": "test", "model": "m", "openmp": {}}) == "8914e5c7570f7c64"
    # MKL's split: machine, weight shapes (sorted tuples) and the row counts tried
    key = {"machine": {"cpu": "test"}, "shapes": sorted([(48, 64), (32, 48)]), "tried": (2, 3, 4, 5, 6, 8)}
    assert key_hash(key) == "820203ab9f0b69da"


def test_the_timing_caches_keep_their_folders_and_keys(tiny_lm, tmp_path, monkeypatch):
    from dataclasses import replace

    import torch

    from drafting.machine.cost_curve import CURVES, curve_key
    from drafting.weights.mkl import SPLIT_CACHE
    from drafting.weights.probe import PROBE_CACHE, cache_path

    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    threads = torch.get_num_threads()
    lm = replace(tiny_lm, name="tiny")
    assert curve_key(lm, 256) == f"tiny|cpu|torch.float32|{threads}|256"  # float: the key of before the formats
    assert curve_key(replace(lm, weights="onednn"), 256) == f"tiny|cpu|torch.float32|{threads}|256|onednn"
    mkl = replace(lm, weights="mkl", weights_key="mkl|torch 32x48<=4")
    assert curve_key(mkl, 1536) == f"tiny|cpu|torch.float32|{threads}|1536|mkl|torch 32x48<=4"
    assert CURVES.path(curve_key(lm, 256)).parent == tmp_path / "cost"
    fp = {"probe": 2, "cpu": "test"}
    assert cache_path(fp) == PROBE_CACHE.path(fp) == tmp_path / "modes" / f"{key_hash(fp)}.json"
    assert SPLIT_CACHE.path({"x": 1}).parent == tmp_path / "mkl-split"
