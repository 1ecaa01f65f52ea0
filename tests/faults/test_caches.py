"""goose's caches survive crashes, races, damaged files and folders it cannot write: the converted GGUF folder and
the assembled packaged GGUF appear only whole, two first loads at once both succeed, a damaged cache file is
ignored and replaced with one line saying so, and an unwritable cache makes goose run without caching, saying so
once. The CLI runs are real subprocesses, with outputs compared against a normal run."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from support.cli import ROOT, cli_env
from support.fake_distribution import install_chunked_model

from drafting import disk_cache
from drafting.disk_cache import DiskCache
from drafting.errors import ModelError, SpecError
from drafting.models.gguf_convert import convert_gguf, converted_folder, ensure_converted
from drafting.models.loader import embedded_gguf
from drafting.models.packaged import packaged_gguf
from drafting.sources.adjacency import AdjacencyTable
from drafting.speculators import create


@pytest.fixture(autouse=True)
def fresh_notes(monkeypatch):
    """Each test starts as a new process would: nothing said yet about the cache."""
    monkeypatch.setattr(disk_cache, "_SAID", set(), raising=False)


def cache_lines(stderr: str) -> list[str]:
    """goose's one-line notes (and errors) that speak of a cache."""
    return [line for line in stderr.splitlines() if re.match(r"goose: .*\bcache\b", line)]


# --- the keyed timing cache ------------------------------------------------------------------------------------

def test_a_damaged_timing_file_is_ignored_replaced_and_said_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    kind = DiskCache("test-kind", parse=lambda doc, key: list(doc["a"]))
    for key, text in [("k1", "[]"), ("k2", '{"a": [1, 2'), ("k3", '{"b": 1}')]:
        kind.path(key).parent.mkdir(parents=True, exist_ok=True)
        kind.path(key).write_text(text)
        assert kind.read(key) is None
    lines = cache_lines(capsys.readouterr().err)
    assert len(lines) == 1 and str(kind.path("k1")) in lines[0]
    assert not kind.path("k1").exists()  # never read again, even where nothing replaces it (a busy machine)
    kind.write("k2", {"a": [3]})
    assert kind.read("k2") == [3]
    kind.path("k4").write_text("")
    assert kind.read("k4") is None and capsys.readouterr().err == ""  # once per process


def test_an_older_entry_is_measured_again_without_a_word(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    kind = DiskCache("test-kind", parse=lambda doc, key: None)  # a well-formed entry the kind no longer uses
    kind.write("k", {"a": 1})
    assert kind.read("k") is None and capsys.readouterr().err == ""


def test_an_unwritable_timing_cache_is_said_once(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("GOOSE_CACHE", str(blocker))
    DiskCache("test-kind").write("k", {"v": 1})
    DiskCache("other-kind").write("k", {"v": 1})
    lines = cache_lines(capsys.readouterr().err)
    assert len(lines) == 1 and str(blocker) in lines[0]


# --- the packaged model's assembled GGUF -----------------------------------------------------------------------

CHUNKS = [b"GGUF" + bytes(range(256)) * 4096, bytes(300_000), b"tail"]
WHOLE = b"".join(CHUNKS)


@pytest.fixture
def chunked_model(tmp_path, monkeypatch):
    return install_chunked_model(tmp_path, monkeypatch, "goose-chunked", CHUNKS)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp")) if folder.exists() else []


def test_two_assemblies_at_once_both_succeed(chunked_model, monkeypatch):
    """The first assembly stops after its first chunk until the second has finished; with one shared temporary
    file the second renames the first's file away under it."""
    second_done, paused = threading.Event(), threading.Event()
    real_open = io.open

    def pausing_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        if threading.current_thread().name == "first" and "w" in mode:
            write = f.write

            def slow_write(block):
                n = write(block)
                if not paused.is_set():
                    paused.set()
                    second_done.wait(60)
                return n

            return _Wrapped(f, slow_write)
        return f

    monkeypatch.setattr(io, "open", pausing_open)
    results = {}

    def assemble(name):
        try:
            results[name] = packaged_gguf(chunked_model)
        except Exception as exc:  # noqa: BLE001 - the test reports what each assembly raised
            results[name] = exc
        finally:
            if name == "second":
                second_done.set()

    first = threading.Thread(target=assemble, args=("first",), name="first")
    first.start()
    assert paused.wait(60)
    second = threading.Thread(target=assemble, args=("second",), name="second")
    second.start()
    second.join(120)
    first.join(120)
    assert isinstance(results["first"], Path), results["first"]
    assert results["first"] == results["second"] and results["first"].read_bytes() == WHOLE
    assert _leftovers(results["first"].parent) == []


class _Wrapped:
    """A file object whose ``write`` is replaced (io's own file objects do not take new attributes)."""

    def __init__(self, f, write):
        self._f, self.write = f, write

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def _assembly_fails_and_leaves_nothing(chunked_model, monkeypatch, spoil_write) -> None:
    """Assemble with every binary write going through ``spoil_write(write)``: the assembly is refused, nothing
    is left that a later load trusts, and a clean assembly afterwards gives the whole file."""
    real_open = io.open

    def spoiled_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        return _Wrapped(f, spoil_write(f.write)) if "w" in mode and "b" in mode else f

    monkeypatch.setattr(io, "open", spoiled_open)
    with pytest.raises(ModelError):
        packaged_gguf(chunked_model)
    monkeypatch.setattr(io, "open", real_open)
    cache = Path(os.environ["GOOSE_CACHE"]) / "gguf"
    assert not list(cache.glob("*.gguf")) and _leftovers(cache) == []
    assert packaged_gguf(chunked_model).read_bytes() == WHOLE


def test_a_file_written_wrong_is_never_put_in_place(chunked_model, monkeypatch):
    # each block loses its last byte on the way to the disk, though the write reports it whole
    _assembly_fails_and_leaves_nothing(chunked_model, monkeypatch,
                                       lambda write: lambda block: write(bytes(block)[:-1]) + 1)


def test_a_crash_mid_write_leaves_nothing_to_trust(chunked_model, monkeypatch):
    def write_then_fail(write):
        written = []

        def once(block):
            if written:
                raise OSError(5, "Input/output error")
            written.append(len(block))
            return write(block)

        return once

    _assembly_fails_and_leaves_nothing(chunked_model, monkeypatch, write_then_fail)


def test_a_truncated_assembled_file_is_assembled_again_with_a_note(chunked_model, capsys):
    path = packaged_gguf(chunked_model)
    with open(path, "r+b") as f:
        f.truncate(1000)
    capsys.readouterr()
    assert packaged_gguf(chunked_model) == path and path.read_bytes() == WHOLE
    lines = cache_lines(capsys.readouterr().err)
    assert len(lines) == 1 and str(path) in lines[0]


# --- the converted GGUF folder ---------------------------------------------------------------------------------

@pytest.mark.heavy  # two conversions, the first crashed on purpose
def test_a_crash_mid_conversion_leaves_no_folder_a_load_trusts(small_gguf, tmp_path, monkeypatch, capsys):
    import safetensors.torch

    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path / "cache"))
    gguf = small_gguf
    folder = converted_folder(gguf)
    real_save = safetensors.torch.save_file

    def save_half_then_crash(tensors, filename, metadata=None):
        real_save(tensors, filename, metadata=metadata)
        with open(filename, "r+b") as f:
            f.truncate(os.path.getsize(filename) // 2)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(safetensors.torch, "save_file", save_half_then_crash)
    with pytest.raises(OSError):
        convert_gguf(gguf, folder)
    assert not folder.exists() and _leftovers(folder.parent) == []
    monkeypatch.setattr(safetensors.torch, "save_file", real_save)
    assert ensure_converted(gguf) == folder and (folder / "model.safetensors").exists()
    assert _leftovers(folder.parent) == [] and cache_lines(capsys.readouterr().err) == []

    # a folder left damaged by hand (or by an older goose) is converted again, with a note
    (folder / "goose.json").write_text('{"format": ')
    assert ensure_converted(gguf) == folder
    assert json.loads((folder / "goose.json").read_text())["source"] == str(gguf)
    lines = cache_lines(capsys.readouterr().err)
    assert len(lines) == 1 and str(folder) in lines[0]


CONVERT_AT_ONCE = r"""
import hashlib, json, sys, time
from pathlib import Path

role, signals = sys.argv[1], Path(sys.argv[2])
if role == "first":
    import safetensors.torch

    real_save = safetensors.torch.save_file

    def save_after_the_second(*args, **kwargs):
        # stop before writing the weights until the second process has converted, loaded and decoded
        (signals / "first-paused").touch()
        for _ in range(6000):
            if (signals / "second-done").exists():
                break
            time.sleep(0.05)
        return real_save(*args, **kwargs)

    safetensors.torch.save_file = save_after_the_second
else:
    for _ in range(6000):
        if (signals / "first-paused").exists():
            break
        time.sleep(0.05)

import torch
from drafting.engine.decode import Decoder
from drafting.models.loader import load_model
from drafting.speculators import create

lm = load_model(sys.argv[3], device="cpu", dtype="float32", weights="float")
ids = list(lm.tokenizer("The capital of France is")["input_ids"])
with torch.no_grad():
    logits = lm.model(torch.tensor([ids])).logits[0, -1]
tokens = Decoder(lm, create("ar")).generate(ids, 8).output_ids
print(json.dumps({"logits": hashlib.sha256(logits.numpy().tobytes()).hexdigest(), "tokens": tokens}))
if role == "second":
    (signals / "second-done").touch()
"""


@pytest.mark.heavy  # two fresh processes racing through a conversion; make test's two workers also share one cache
def test_two_first_loads_at_once_both_succeed_and_leave_one_folder(small_gguf, tmp_path):
    """Two processes convert one GGUF (2 layers of the embedded model) into one empty cache at once; the first is
    held inside its conversion until the second has converted, loaded and decoded."""
    cache, signals = tmp_path / "cache", tmp_path / "signals"
    signals.mkdir()
    env = cli_env(GOOSE_CACHE=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", CONVERT_AT_ONCE, role, str(signals), str(small_gguf)],
                              cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for role in ("first", "second")]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert outs[0] == outs[1] and len(outs[0]["tokens"]) == 8
    entries = sorted(p.name for p in (cache / "gguf").iterdir() if p.is_dir())
    assert entries == [converted_folder(small_gguf).name]


# --- the adjacency table's cache file --------------------------------------------------------------------------

def test_a_damaged_adjacency_cache_is_ignored_and_replaced(flat_tiny_lm, tmp_path, capsys):
    from drafting.engine.decode import Decoder

    path = tmp_path / "adj.npz"
    path.write_bytes(b"PK\x03\x04 truncated")
    spec = create(f"goose:cache={path}")
    assert len(spec.table) == 0
    lines = cache_lines(capsys.readouterr().err)
    assert len(lines) == 1 and str(path) in lines[0]
    Decoder(flat_tiny_lm, spec).generate([1, 5, 9, 5, 9, 5], 12)
    spec.save_cache()
    back = AdjacencyTable(k=spec.table_size())
    back.load(path)
    assert len(back) == len(spec.table) > 0
    assert [p.name for p in tmp_path.iterdir()] == ["adj.npz"]  # no temporary left beside it


def test_an_adjacency_table_of_other_settings_is_still_refused(tmp_path):
    path = tmp_path / "adj.npz"
    table = AdjacencyTable(k=create("goose").table_size() + 1)
    table.harvest_prefill([1, 5, 2], torch.randn(3, 16))
    table.save(path)
    with pytest.raises(SpecError, match="other settings"):
        create(f"goose:cache={path}")  # a good table for k=3: the user chooses, goose does not overwrite it


def test_an_adjacency_cache_in_a_folder_it_cannot_enter(tmp_path):
    prefix = unprivileged()
    locked = tmp_path / "locked"
    locked.mkdir()
    code = ("import sys; from drafting.speculators import create; from drafting.engine.decode import Decoder; "
            "from support.tinymodel import tiny_llama; "
            "lm = tiny_llama(128, 64, 512, bos=1, eos_ids={127}, name='tiny'); "
            f"s = create('goose:cache={locked}/adj.npz'); Decoder(lm, s).generate([1, 5, 9, 5], 6); s.save_cache(); "
            "print('decoded')")
    locked.chmod(0)
    try:
        done = subprocess.run([*prefix, sys.executable, "-c", code], cwd=ROOT,
                              env=cli_env(PYTHONPATH=str(ROOT / "tests")), capture_output=True, text=True,
                              timeout=300)
    finally:
        locked.chmod(0o755)
    assert done.returncode == 0 and done.stdout.strip() == "decoded", done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    lines = cache_lines(done.stderr)
    assert len(lines) == 1 and str(locked) in lines[0], done.stderr


# --- goose as a user runs it: a damaged cache and a read-only one -----------------------------------------------

def unprivileged() -> list[str]:
    """The command prefix under which a process cannot write where the permission bits say it cannot. Root writes
    anywhere, so as root the process keeps its user but loses every capability (setpriv): the venv and the
    sources may sit in root's own folders, which another user could not read."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: chmod cannot make a folder read-only for this test")
    return [setpriv, "--inh-caps=-all", "--bounding-set=-all", "--"]


def read_only(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def writable(path: Path) -> None:
    """Give the owner every right back, a folder before what it holds (one it could not enter included)."""
    if path.is_symlink():
        return
    path.chmod(path.stat().st_mode | stat.S_IRWXU)
    if path.is_dir():
        for child in path.iterdir():
            writable(child)


@pytest.fixture
def caches(tmp_path):
    made = []

    def make(name: str) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        made.append(folder)
        return folder

    yield make
    for folder in made:  # pytest removes tmp_path later; give the write bits back first
        writable(folder)


def run(cmd: list[str], cache: Path, stdin: str | None = None, as_user: bool = False) -> subprocess.CompletedProcess:
    prefix = unprivileged() if as_user else []
    done = subprocess.run([*prefix, *cmd], cwd=ROOT, env=cli_env(GOOSE_CACHE=str(cache)), input=stdin,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for bad in ("Traceback", "Cannot write the trace file"):
        assert bad not in done.stderr + done.stdout, done.stderr[-3000:]
    return done


def damage(cache: Path) -> list[Path]:
    """Spoil every timing entry and the converted folder's record, each in another way."""
    spoiled = []
    bad = ["[]", '{"sizes": [1, 2', '{"unexpected": "shape"}']
    for i, entry in enumerate(sorted(p for p in cache.rglob("*.json") if p.parent.parent == cache
                                     and p.parent.name != "gguf")):
        entry.write_text(bad[i % len(bad)])
        spoiled.append(entry)
    record = cache / "gguf" / converted_folder(embedded_gguf()).name / "goose.json"
    record.write_text("{")
    spoiled.append(record)
    return spoiled


# The whole-command runs below pick one weight format: `--weights auto` times the formats (and mkl its row split),
# and on a noisy machine a run after the damage can time them differently and read other cost-curve keys, leaving
# spoiled entries it never opened. A damaged entry of every timing cache (one DiskCache) is covered in-process above.
WEIGHTS = "float"


def assert_replaced(spoiled: list[Path]) -> None:
    for path in spoiled:  # gone (measured on a busy machine, not kept) or a good entry again
        if path.exists():
            assert isinstance(json.loads(path.read_text()), dict), path


def one_cache_line(done: subprocess.CompletedProcess, *words: str) -> None:
    lines = cache_lines(done.stderr)
    assert len(lines) == 1, done.stderr[-3000:]
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture
def one_prompt(tmp_path) -> Path:
    path = tmp_path / "prompt.jsonl"
    path.write_text(json.dumps({"id": "p1", "task": "code", "prompt": "Write a Python function that adds two numbers."})
                    + "\n")
    return path


def bench_outputs(path: Path) -> dict[str, list[int]]:
    doc = json.loads(path.read_text())
    assert [r["identical_to_ar"] for r in doc["runs"]] == [True, True], doc["runs"]
    return {r["speculator"]: r["output_ids"] for r in doc["runs"]}


@pytest.mark.slow
@pytest.mark.heavy
def test_bench_with_a_damaged_and_with_a_read_only_cache(caches, one_prompt, tmp_path):
    def bench(cache: Path, out: str, as_user: bool = False):
        done = run([sys.executable, "-m", "goosecli", "bench", str(one_prompt), "-s", "ar,goose", "-n", "8",
                    "--weights", WEIGHTS, "--json", str(tmp_path / out)], cache, as_user=as_user)
        return done, bench_outputs(tmp_path / out)

    cache = caches("cache")
    done, normal = bench(cache, "normal.json")
    assert cache_lines(done.stderr) == []
    spoiled = damage(cache)
    done, again = bench(cache, "damaged.json")
    assert again == normal
    one_cache_line(done, "damaged")
    assert_replaced(spoiled)

    empty = caches("read-only")
    read_only(empty)
    done, unwritable = bench(empty, "read-only.json", as_user=True)
    assert unwritable == normal
    one_cache_line(done, str(empty))


@pytest.mark.slow
@pytest.mark.heavy
def test_bench_with_a_cache_that_cannot_be_created(caches, one_prompt, tmp_path):
    """A cache folder that cannot even be made (below a file, or in /proc) runs as a writable one does, saying so once."""
    def bench(cache: Path, out: str):
        done = run([sys.executable, "-m", "goosecli", "bench", str(one_prompt), "-s", "ar,goose", "-n", "8",
                    "--weights", WEIGHTS, "--json", str(tmp_path / out)], cache)
        return done, bench_outputs(tmp_path / out)

    _, normal = bench(caches("cache"), "normal.json")
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    for name, cache in (("below-a-file", a_file / "cache"), ("in-proc", Path("/proc/goose-cannot-be-made"))):
        done, outputs = bench(cache, f"{name}.json")
        assert outputs == normal
        one_cache_line(done, str(cache))


@pytest.mark.slow
@pytest.mark.heavy
def test_chat_with_a_damaged_and_with_a_read_only_cache(caches):
    def chat(cache: Path, table: Path, as_user: bool = False):
        return run([sys.executable, "-m", "goosecli", "chat", "--plain", "-n", "8", "-s", f"goose:cache={table}",
                    "--weights", WEIGHTS],
                   cache, stdin="Name three colours.\n", as_user=as_user)

    cache = caches("cache")
    table = cache / "adjacency" / "table.npz"
    normal = chat(cache, table)
    assert normal.stdout.strip() and cache_lines(normal.stderr) == [] and table.exists()
    spoiled = damage(cache)
    table.write_bytes(table.read_bytes()[:100])
    damaged = chat(cache, table)
    assert damaged.stdout == normal.stdout
    one_cache_line(damaged, "damaged")
    assert_replaced(spoiled)
    AdjacencyTable(k=create("goose").table_size()).load(table)  # written whole again

    # the converted model is there, but nothing can be written, and the table's folder cannot even be entered
    read_only(cache)
    (cache / "adjacency").chmod(0)
    unwritable = chat(cache, table, as_user=True)
    assert unwritable.stdout == normal.stdout
    one_cache_line(unwritable)


GENERATE = r"""
import json, sys
import drafting

g = drafting.generate("Name three colours.", speculator=sys.argv[1], max_new_tokens=8, weights=sys.argv[2])
print(json.dumps({"text": g.text, "token_ids": g.token_ids}))
"""


@pytest.mark.slow
@pytest.mark.heavy
def test_generate_with_a_damaged_and_with_a_read_only_cache(caches):
    def generate(cache: Path, table: Path, as_user: bool = False):
        done = run([sys.executable, "-c", GENERATE, f"goose:cache={table}", WEIGHTS], cache, as_user=as_user)
        return done, json.loads(done.stdout.strip().splitlines()[-1])

    cache = caches("cache")
    table = cache / "adjacency.npz"
    done, normal = generate(cache, table)
    assert cache_lines(done.stderr) == [] and table.exists()
    spoiled = damage(cache)
    table.write_text("garbage")
    done, again = generate(cache, table)
    assert again == normal
    one_cache_line(done, "damaged")
    assert_replaced(spoiled)

    empty = caches("read-only")
    read_only(empty)
    done, unwritable = generate(empty, empty / "adjacency.npz", as_user=True)
    assert unwritable == normal
    one_cache_line(done, str(empty))
