"""llama.cpp's own speculation as an external reference row: ``llama.cpp-ngram`` (``llama-server --spec-type
ngram-mod``) and ``llama.cpp-ngram-simple``, on the same GGUF, prompt token ids, token limit and threads.

llama.cpp drafts n-gram chains inside its server (common/speculative.cpp), so the row starts that server on a
loopback port for the run and asks it for greedy completions of the prompt's token ids, with no prompt cache (each
run pays its own prefill, as every other row does). The server binary is built from the same llama-cpp-python
source by ``make llama-server`` (or named by ``GOOSE_LLAMA_SERVER``). Opt-in: its outputs come from another
program's kernels and are not compared token by token; its tokens/s stand beside ours.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from drafting.baselines.llama_cpp import LlamaCppError, gguf_path
from drafting.engine.decode import GenerationResult
from drafting.engine.llama.offload import gpu_layers_beside, offload_device, server_gpu_layers
from drafting.engine.llama.settings import default_threads
from drafting.engine.loaded_model import LoadedModel
from drafting.engine.stop_rules import check_fits
from drafting.errors import ModelError

NGRAM_MOD = "llama.cpp-ngram"
NGRAM_SIMPLE = "llama.cpp-ngram-simple"
SPEC_TYPES = {NGRAM_MOD: "ngram-mod", NGRAM_SIMPLE: "ngram-simple"}
CONTEXT = 4096
SERVER_ENV = "GOOSE_LLAMA_SERVER"
BUILT = Path(__file__).resolve().parents[2] / ".llama-server" / "bin" / "llama-server"  # `make llama-server`
START_S = 120.0  # the server loads the model and reserves its buffers before it answers


def server_binary() -> Path:
    named = os.environ.get(SERVER_ENV)
    for found in (named, str(BUILT) if BUILT.is_file() else None, shutil.which("llama-server")):
        if found and Path(found).is_file():
            return Path(found)
    raise LlamaCppError(f"The llama.cpp-ngram rows need llama.cpp's own server: `make llama-server` builds it, or set "
                        f"{SERVER_ENV} to a llama-server binary.")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServerRunner:
    """Greedy completions from a ``llama-server`` with n-gram speculation, started on first use, stopped on close."""

    external = True
    same_network = False
    model = None

    def __init__(self, lm: LoadedModel, name: str = NGRAM_MOD, threads: int | None = None):
        self.name = name
        self.lm = lm
        self.binary = server_binary()
        self.gguf = gguf_path(lm)
        self.threads = threads or default_threads()
        self.context = min(lm.max_context, CONTEXT)
        self.eos = set(lm.eos_ids)
        # where goose's model is, as the other llama.cpp rows: the server is built with GPU support where this
        # llama-cpp-python is (`make llama-server` and `make llamacpp-setup` decide alike)
        try:
            self.gpu_layers = gpu_layers_beside(lm.device)
        except ModelError as exc:  # the build is read through llama-cpp-python, which is not installed
            raise LlamaCppError(str(exc)) from None
        self.device = offload_device(self.gpu_layers).type
        self.counts = {"decode_calls": 0, "drafted": 0, "accepted": 0}
        self._proc: subprocess.Popen | None = None
        self._url = ""

    def spec(self) -> str:
        return self.name

    def stats(self) -> dict:
        return dict(self.counts)

    def command(self, port: int) -> list[str]:
        """The server's command line, serving on ``port``."""
        return [str(self.binary), "-m", str(self.gguf), "--host", "127.0.0.1", "--port", str(port),
                "-t", str(self.threads), "-tb", str(self.threads), "-c", str(self.context), "-np", "1",
                "-ngl", server_gpu_layers(self.gpu_layers), "--spec-type", SPEC_TYPES[self.name], "--no-webui"]

    def _start(self) -> None:
        port = _free_port()
        self._url = f"http://127.0.0.1:{port}"
        self._proc = subprocess.Popen(self.command(port), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                why = (self._proc.stderr.read() or "").strip().splitlines()
                raise LlamaCppError(f"llama-server stopped as it started: {why[-1] if why else 'no reason given'}.")
            try:
                with urllib.request.urlopen(self._url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.close()
        raise LlamaCppError(f"llama-server did not answer on {self._url} within {START_S:.0f} s.")

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> GenerationResult:
        check_fits(prompt_ids, self.context, window="llama-server's context of")
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        limit = min(max_new_tokens, self.context - len(prompt_ids))
        body = {"prompt": list(prompt_ids), "n_predict": limit, "temperature": 0.0, "top_k": 1, "cache_prompt": False,
                "return_tokens": True, "stream": False, "samplers": ["top_k"]}
        request = urllib.request.Request(self._url + "/completion", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=600) as r:
                doc = json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise LlamaCppError(f"{self.name} failed: {exc}") from None
        wall = time.perf_counter() - t0
        out = [int(t) for t in doc.get("tokens", [])][:limit]
        timings = doc.get("timings", {})
        accepted = int(timings.get("draft_n_accepted", 0) or 0)
        # one pass per emitted token less the accepted drafts (each step emits its accepted drafts and one more),
        # and the prefill
        self.counts["decode_calls"] += int(timings.get("predicted_n", len(out))) - accepted + 1
        self.counts["drafted"] += int(timings.get("draft_n", 0) or 0)
        self.counts["accepted"] += accepted
        if len(out) >= limit and not (out and out[-1] in self.eos):
            stop = "context" if limit < max_new_tokens else "max_new_tokens"
        else:
            stop = "eos"  # the server stops at an end-of-generation token (returned or not)
        prefill = float(timings.get("prompt_ms", 0.0)) / 1000.0
        return GenerationResult(prompt_ids=list(prompt_ids), output_ids=out, stop_reason=stop, prefill_s=prefill,
                                wall_s=wall)

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._proc = None

    def __del__(self):
        self.close()
