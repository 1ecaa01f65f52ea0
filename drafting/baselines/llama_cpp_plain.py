"""The ``llama.cpp`` reference row: llama.cpp's own greedy loop, as its ``simple`` example runs it: one
``llama_decode`` per token, the next token picked by llama.cpp's greedy sampler, no Python work on the logits.

On the llama.cpp engine it shares the model goose already loaded (a second context on the same weights, as
llama.cpp allows), so a bench holds one copy of the weights instead of two: for Qwen2.5-Coder-1.5B that is the
difference between 1.8 and 3.2 GB resident. Elsewhere (the transformers engine, or a ``--weights q8_0`` copy: the
row runs the file given, as its user would) it loads the file itself, read rather than mapped.
"""

from __future__ import annotations

import ctypes
import time
import weakref

from drafting.baselines.llama_cpp import CONTEXT, PLAIN, LlamaCppError, gguf_path
from drafting.engine.decode import GenerationResult
from drafting.engine.forward import LLAMA_CPP
from drafting.engine.llama.net import llama_lib, read_not_mapped
from drafting.engine.llama.offload import gpu_layers_beside, offload_device
from drafting.engine.llama.settings import default_threads
from drafting.engine.loaded_model import LoadedModel
from drafting.engine.stop_rules import check_fits
from drafting.errors import ModelError

BATCH = 256  # prefill chunk: the engine's own (LlamaSettings.batch), so both pay the same prefill


class LlamaCppPlainRunner:
    """Greedy generation with llama.cpp's own loop on prompt token ids."""

    external = True
    same_network = False  # llama.cpp's kernels on the GGUF's weights, outside goose's decode loop
    model = None
    name = PLAIN

    def __init__(self, lm: LoadedModel, threads: int | None = None):
        try:
            lib = self.lib = llama_lib()
        except ModelError as exc:  # not installed, or its native library is broken; one sentence
            raise LlamaCppError(str(exc)) from None
        self.lm = lm
        self.threads = threads or default_threads()  # the engine's own default: both run on the same cores
        self.decode_calls = 0
        self._one = (ctypes.c_int32 * 1)()  # the token of a decoding step, written in place each step
        path = gguf_path(lm)
        net = lm.model if lm.engine == LLAMA_CPP else None
        if net is not None and net.path == path:
            self.owner, model, own_model = net, net.model, None  # kept alive while the row runs on its weights
            self.device = lm.device.type  # where those weights are
        else:
            mp = lib.llama_model_default_params()
            read_not_mapped(lib, mp)
            mp.n_gpu_layers = gpu_layers_beside(lm.device)  # every layer on the GPU when goose uses one and it can
            self.device = offload_device(mp.n_gpu_layers).type
            model = own_model = lib.llama_model_load_from_file(str(path).encode(), mp)
            if not model:
                raise LlamaCppError(f"llama.cpp could not load {str(path)!r}.")
            self.owner = None
        cp = lib.llama_context_default_params()
        cp.n_ctx = min(lm.max_context, CONTEXT)
        cp.n_batch = cp.n_ubatch = BATCH
        cp.n_seq_max = 1
        cp.n_threads = cp.n_threads_batch = self.threads
        cp.no_perf = True
        ctx = lib.llama_init_from_model(model, cp)
        sampler = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        self._free = weakref.finalize(self, _free_all, lib, sampler, ctx, own_model)
        if not ctx:
            raise LlamaCppError(f"llama.cpp could not make a context for {path.name}.")
        lib.llama_sampler_chain_add(sampler, lib.llama_sampler_init_greedy())
        self.ctx, self.sampler = ctx, sampler
        self.memory = lib.llama_get_memory(ctx)
        self.n_ctx = int(lib.llama_n_ctx(ctx))
        self.eos = set(lm.eos_ids) | {int(lib.llama_vocab_eos(lib.llama_model_get_vocab(model)))}

    def spec(self) -> str:
        return self.name

    def stats(self) -> dict:
        return {"decode_calls": self.decode_calls}

    def _decode(self, arr, n: int) -> None:
        self.decode_calls += 1
        rc = self.lib.llama_decode(self.ctx, self.lib.llama_batch_get_one(arr, n))
        if rc != 0:
            raise LlamaCppError(f"{self.name}: llama.cpp could not decode {n} tokens (error {rc}).")

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> GenerationResult:
        check_fits(prompt_ids, self.n_ctx, window="llama.cpp's context of")
        limit = min(max_new_tokens, self.n_ctx - len(prompt_ids))
        stop = "context" if limit < max_new_tokens else "max_new_tokens"
        self.lib.llama_memory_clear(self.memory, True)  # every run pays its own prefill
        self.lib.llama_sampler_reset(self.sampler)
        out: list[int] = []
        t0 = time.perf_counter()
        first = 0.0
        for start in range(0, len(prompt_ids), BATCH):
            chunk = prompt_ids[start:start + BATCH]
            self._decode((ctypes.c_int32 * len(chunk))(*chunk), len(chunk))
        while True:
            tok = int(self.lib.llama_sampler_sample(self.sampler, self.ctx, -1))
            if not out:
                first = time.perf_counter() - t0
            out.append(tok)
            if tok in self.eos:
                stop = "eos"
                break
            if len(out) >= limit:
                break
            self._one[0] = tok
            self._decode(self._one, 1)
        wall = time.perf_counter() - t0
        return GenerationResult(prompt_ids=list(prompt_ids), output_ids=out, stop_reason=stop, prefill_s=first, wall_s=wall)

    def close(self) -> None:
        self._free()


def _free_all(lib, sampler, ctx, model) -> None:
    if sampler:
        lib.llama_sampler_free(sampler)
    if ctx:
        lib.llama_free(ctx)
    if model:
        lib.llama_model_free(model)
