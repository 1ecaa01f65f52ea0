"""GooseProposer behind vLLM's OpenAI-compatible server (`vllm serve`, through scripts/vllm_serve.py): the same
chat requests to a server without speculation and to one drafting with GOOSE get the same answers, token for
token, and the second one did draft.

Only where vLLM is importable (.venv-vllm/bin/python -m pytest -q tests/integrations/test_vllm_serve.py); each
server listens on 127.0.0.1 only, every request and the start have a time limit, and the server is stopped
whatever happens."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from drafting.integrations.vllm import speculative_config

HAS_VLLM = importlib.util.find_spec("vllm") is not None
ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed here (make vllm-setup; run with "
                                                       ".venv-vllm/bin/python)")]

START_S = 600  # a server that is not answering /health by then has failed
REQUEST_S = 300  # one chat request
PROMPTS = [
    "Write a Python function is_even(n), then write is_odd(n) the same way.",
    "List the numbers from one to twelve in words, one per line.",
    "Name three colours.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def vllm_server(model: str, log: Path, spec: dict | None):
    """``vllm serve`` on 127.0.0.1 (the command docs/vllm.md gives), yielding its base URL once it is healthy."""
    port = free_port()
    cmd = [sys.executable, "-m", "scripts.vllm_serve", model, "--host", "127.0.0.1",
           "--port", str(port), "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024",
           "--max-num-seqs", "4", "--seed", "0", "--gpu-memory-utilization", "0.5"]
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(spec)]
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode} before it answered; its log is {log}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve did not answer /health within {START_S} s; its log is {log}")
            time.sleep(2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def chat(url: str, model: str, prompt: str) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0.0,
            "max_tokens": 48, "seed": 0, "return_token_ids": True}
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=REQUEST_S) as r:
        choice = json.loads(r.read())["choices"][0]
    return {"text": choice["message"]["content"], "token_ids": choice.get("token_ids")}


def accepted_tokens(url: str) -> float:
    """vLLM's counter of accepted draft tokens, from the server's Prometheus metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:spec_decode_num_accepted_tokens_total"))


def test_vllm_serve_with_goose_answers_as_without_speculation(tmp_path):
    from drafting.api import embedded_model_folder

    model = os.environ.get("GOOSE_VLLM_MODEL") or embedded_model_folder()
    answers = {}
    for name, spec in (("none", None), ("goose", speculative_config(8))):
        with vllm_server(model, tmp_path / f"{name}.log", spec) as url:
            answers[name] = [chat(url, model, p) for p in PROMPTS]
            if spec is not None:
                assert accepted_tokens(url) > 0, "the goose server accepted no draft token: it did not speculate"
    for plain, goose in zip(answers["none"], answers["goose"]):
        assert plain["text"] and len(set(plain["token_ids"] or plain["text"])) > 3
        assert goose == plain
