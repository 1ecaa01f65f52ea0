"""Shared fixtures: a tiny random Llama for mechanics, the embedded model for end-to-end losslessness.

Every test session gets its own empty goose cache (``$GOOSE_CACHE``, inherited by the CLI subprocesses and
shared by pytest-xdist's workers), so no test depends on converted models or cost curves left by earlier runs;
the embedded model converts once per session. The user's real cache is watched: a test that changes it fails,
and so does the session.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ... in a pytest-xdist worker, else ""


def _cpus_of_this_worker() -> None:
    """Under pytest-xdist (``make test`` runs two workers), each worker takes its own share of the CPUs, as on a
    smaller machine, before torch starts its threads: threads of two workers spread over the same cores wait for
    each other at every parallel region (docs/speed.md), and goose's load meter then reads only the worker's own
    CPUs, so the other worker does not make the machine look busy."""
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not XDIST_WORKER or count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    share = len(cpus) // count
    if share >= 1:  # fewer CPUs than workers: leave them all to the scheduler
        index = int(XDIST_WORKER[2:]) % count
        os.sched_setaffinity(0, cpus[index * share:(index + 1) * share])


_cpus_of_this_worker()

from support.tinymodel import tiny_llama  # noqa: E402  (imports torch: after the CPUs are chosen)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# pytest-xdist's workers inherit the first process's environment, GOOSE_CACHE (its test cache) included: the
# user's real cache is passed on under a name of its own
REAL_CACHE = Path(os.environ.get("GOOSE_TEST_REAL_CACHE") or os.environ.get("GOOSE_CACHE")
                  or Path.home() / ".cache" / "goose")
os.environ["GOOSE_TEST_REAL_CACHE"] = str(REAL_CACHE)
# One cache for the whole run: an xdist worker takes the first process's, so each model is converted and each
# cost curve measured once, not once a worker (goose's cache is made for processes sharing it).
SHARED = bool(XDIST_WORKER) and "GOOSE_TEST_CACHE" in os.environ
TEST_CACHE = Path(os.environ["GOOSE_TEST_CACHE"]) if SHARED else Path(tempfile.mkdtemp(prefix="goose-test-cache-"))
os.environ["GOOSE_TEST_CACHE"] = str(TEST_CACHE)
os.environ["GOOSE_CACHE"] = str(TEST_CACHE)  # set on import: before any fixture loads a model


def cache_snapshot(root: Path) -> dict[str, tuple[int, int]] | None:
    """Every entry under ``root`` with its size and modification time; None when ``root`` does not exist."""
    if not root.exists():
        return None
    out = {}
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        out[str(path.relative_to(root))] = (st.st_size if path.is_file() else 0, st.st_mtime_ns)
    return out


def cache_changes(before, after) -> list[str]:
    if before == after:
        return []
    if before is None or after is None:
        return ["the folder itself was " + ("created" if before is None else "removed")]
    changed = [p for p in after if p in before and after[p] != before[p]]
    return ([f"added {p}" for p in after if p not in before] + [f"removed {p}" for p in before if p not in after]
            + [f"changed {p}" for p in changed])


_real_cache_at_start = cache_snapshot(REAL_CACHE)
_real_cache_now = _real_cache_at_start


@pytest.fixture(autouse=True)
def real_cache_untouched():
    """Fail the test during which the user's real goose cache changed."""
    global _real_cache_now
    yield
    after = cache_snapshot(REAL_CACHE)
    changes = cache_changes(_real_cache_now, after)
    _real_cache_now = after
    if changes:
        pytest.fail(f"the real goose cache {REAL_CACHE} changed during this test (written by the test, or by another "
                    f"goose process using it meanwhile): {'; '.join(changes[:5])}", pytrace=False)


_run_changes: list[str] = []


def pytest_sessionfinish(session, exitstatus):
    """The last word: anything (a session fixture, a subprocess) that changed the real cache fails the run.

    What the session built (models, tables, pools) is frozen out of the garbage collector first: pytest collects
    garbage five times over after the session to report unraisable exceptions, and on this heap that took minutes
    (docs/architecture.md, Tests)."""
    gc.freeze()
    _run_changes.extend(cache_changes(_real_cache_at_start, cache_snapshot(REAL_CACHE)))
    if not SHARED:  # the first process outlives its workers and removes it
        shutil.rmtree(TEST_CACHE, ignore_errors=True)
    if _run_changes:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if _run_changes:
        terminalreporter.write_line(f"FAILED: the real goose cache {REAL_CACHE} changed during the test run (a test, "
                                    f"or another goose process using it meanwhile): {'; '.join(_run_changes[:10])}",
                                    red=True, bold=True)


@pytest.fixture(scope="session")
def tiny_lm():
    """A 2-layer random Llama (vocab 128) in fp32, wrapped like a loaded model."""
    return tiny_llama(128, 64, 512, bos=1, eos_ids={127}, name="tiny-random-llama")


@pytest.fixture(scope="session")
def flat_tiny_lm(tiny_lm):
    """``tiny_lm`` whose tree budgets read the flat verify cost (support.flat_cost), for tests that need drafts
    or harvests to happen: the curve measured for it on a busy machine can be steep enough that nothing pays."""
    from support.flat_cost import priced_flat

    return priced_flat(tiny_lm)


@pytest.fixture(scope="session")
def embedded_lm():
    from drafting.models.loader import load_model

    return load_model()


@pytest.fixture(scope="session")
def small_gguf(tmp_path_factory) -> Path:
    """A 2-layer F16 GGUF made from the embedded model: converts in a moment, for tests of the conversion."""
    from support.small_gguf import write_f16_gguf

    from drafting.models.loader import embedded_gguf

    path = tmp_path_factory.mktemp("gguf") / "small-f16.gguf"
    write_f16_gguf(embedded_gguf(), path)
    return path


@pytest.fixture(scope="session")
def llama_lm():
    """The embedded SmolLM2-135M (Q4_1) on the llama.cpp engine (skipped without llama-cpp-python)."""
    pytest.importorskip("llama_cpp")
    from drafting.models.loader import load_model

    return load_model(engine="llama.cpp")


@pytest.fixture(scope="session")
def small_llama(small_gguf):
    """``small_gguf`` on the llama.cpp engine: batched and one-token passes round alike on its F16 weights."""
    pytest.importorskip("llama_cpp")
    from drafting.models.loader import load_model

    return load_model(str(small_gguf), engine="llama.cpp")


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def real_prompts(embedded_lm) -> list[tuple[str, list[int]]]:
    """12 real prompts (2 per task group, side by side) as (id, chat-templated token ids)."""
    from drafting.models.chat_template import encode

    out = []
    for rec in _read(EXAMPLES / "prompts.jsonl"):
        out.append((rec["id"], encode(embedded_lm.tokenizer, [{"role": "user", "content": rec["prompt"]}])))
    return out


LOSSLESS_TOKENS = 40


class PlainOutputs(dict):
    """Plain greedy decoding of the real prompts, each decoded the first time a test asks for it (a run that
    checks only some prompts does not pay for the others)."""

    def __init__(self, lm, prompts):
        from drafting.engine.decode import Decoder
        from drafting.speculators import create

        super().__init__()
        self._ids = dict(prompts)
        self._decoder = Decoder(lm, create("ar"))

    def __missing__(self, pid: str) -> list[int]:
        self[pid] = self._decoder.generate(self._ids[pid], LOSSLESS_TOKENS).output_ids
        return self[pid]


@pytest.fixture(scope="session")
def ar_outputs(embedded_lm, real_prompts) -> dict[str, list[int]]:
    """Plain greedy decoding of every real prompt, computed once per test session (and only where asked)."""
    return PlainOutputs(embedded_lm, real_prompts)


FIRST_OF_EACH_TASK = slice(0, None, 2)  # the real prompts come two per task group, side by side
SECOND_OF_EACH_TASK = slice(1, None, 2)


@pytest.fixture(scope="session")
def assert_lossless(embedded_lm, real_prompts, ar_outputs):
    """Call with a speculator spec: its greedy output must equal `ar` on the real prompts ``prompts`` picks
    (every one by default; FIRST_OF_EACH_TASK or SECOND_OF_EACH_TASK: one per task group)."""
    from drafting.engine.decode import Decoder
    from drafting.speculators import create

    def check(spec: str, prompts: slice = slice(None)) -> None:
        dec = Decoder(embedded_lm, create(spec))
        for pid, ids in real_prompts[prompts]:
            got = dec.generate(ids, LOSSLESS_TOKENS).output_ids
            assert got == ar_outputs[pid], f"{spec} differs from ar on {pid}"

    return check
