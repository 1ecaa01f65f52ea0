"""``--weights q8_0`` on the llama.cpp engine: a Q8_0 copy of a 4-to-6-bit GGUF, made once by llama.cpp's own
quantiser and kept in goose's cache (or, where the cache cannot be written, in a temporary folder for the process);
it computes the file's own model up to rounding, and it is refused for files it would only round."""

from __future__ import annotations

import json

import numpy as np
import pytest

from drafting.errors import ModelError

pytest.importorskip("llama_cpp")  # the engine is an extra: `make llamacpp-setup`


def last_log_probs(lm, ids):
    """The log-probabilities after ``ids`` from one plain prefill of ``lm`` on the llama.cpp engine."""
    forward = lm.make_forward(lm)
    logits = forward.prefill(ids, forward.new_cache(), logit_rows=1)[-1].numpy().astype(np.float64)
    top = logits.max()
    return logits - top - np.log(np.exp(logits - top).sum())


@pytest.fixture(scope="module")
def q8_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def test_the_copy_is_made_once_and_computes_the_files_model(q8_cache, monkeypatch, llama_lm):
    from drafting.engine.llama.reencode import as_q8_0, file_type
    from drafting.models.loader import embedded_gguf, load_model

    monkeypatch.setenv("GOOSE_CACHE", str(q8_cache))
    path = as_q8_0(embedded_gguf())
    assert path.is_relative_to(q8_cache) and file_type(path) == "Q8_0"
    made = path.stat().st_mtime_ns
    assert as_q8_0(embedded_gguf()) == path and path.stat().st_mtime_ns == made  # kept, not made again
    lm = load_model(engine="llama.cpp", weights="q8_0")
    try:
        assert lm.weights == "Q8_0 from Q4_1" and lm.model.path == path and lm.gguf == embedded_gguf()
        ids = lm.tokenizer.encode("The capital of France is Paris. The capital of Italy is")
        own, copy = last_log_probs(llama_lm, ids), last_log_probs(lm, ids)
        assert own.argmax() == copy.argmax()
        # the weights move by at most 1/254 of a block's largest value, and each kernel rounds the activations to 8
        # bits its own way (Q8_1 for Q4_1, Q8_0 for Q8_0): the likely tokens move as much as batched and one-token
        # kernels move them on the file itself (up to about 0.7), no more
        likely = np.argsort(-own)[:10]
        assert np.abs(own[likely] - copy[likely]).max() < 0.5
    finally:
        lm.model.close()


def test_an_unwritable_cache_gets_a_copy_for_this_process_only(tmp_path, monkeypatch, capfd):
    from drafting.engine.llama import reencode
    from drafting.models.loader import embedded_gguf

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("GOOSE_CACHE", str(blocker))
    monkeypatch.setattr(reencode, "_OUTSIDE", {})
    path = reencode.as_q8_0(embedded_gguf())
    assert path.is_file() and not path.is_relative_to(blocker)
    assert reencode.as_q8_0(embedded_gguf()) == path  # made once for the process
    assert "temporary folder" in capfd.readouterr().err


def test_a_file_of_eight_bits_or_more_is_refused(small_gguf):
    from drafting.engine.llama.reencode import as_q8_0

    with pytest.raises(ModelError, match="holds F16 weights"):
        as_q8_0(small_gguf)


def test_doctor_times_the_files_weights_and_the_copy_side_by_side(q8_cache, tmp_path):
    from support.cli import run_goose

    out = tmp_path / "d.json"
    # --even-if-busy: a test may share the cores, and doctor otherwise stops at the first mode on a busy machine
    done = run_goose("doctor", "--engine", "llama.cpp", "--modes", "auto,q8_0", "--repeats", "1", "--prefix", "32",
                     "--even-if-busy", "--json", str(out), GOOSE_CACHE=str(q8_cache), timeout=600)
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert [m["mode"] for m in doc["modes"]] == ["llama.cpp Q4_1", "llama.cpp Q8_0 from Q4_1"]
    assert all(m["error"] is None and len(m["seconds"]) == 3 for m in doc["modes"])
    assert "fastest one-token step" in done.stdout and "--weights q8_0 against the file's own" in done.stdout
    bad = run_goose("doctor", "--engine", "llama.cpp", "--modes", "bfloat16", timeout=120)
    assert bad.returncode == 2 and "Unknown llama.cpp mode" in bad.stderr and "Traceback" not in bad.stderr


def test_the_types_script_times_the_file_and_a_copy(small_gguf):
    import subprocess
    import sys

    from support.cli import ROOT, cli_env

    done = subprocess.run([sys.executable, "-m", "scripts.llama_types", "--model", str(small_gguf), "--types",
                           "own,q8_0"], cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith(("| own |", "| q8_0 |"))]
    assert len(rows) == 2 and all(len(r.split("|")) == 9 for r in rows), done.stdout
