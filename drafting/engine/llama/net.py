"""A GGUF model in llama.cpp, through llama-cpp-python's low-level API: one model, one context, one batch.

The high-level ``Llama`` class gives every token one sequence id; a tree step needs several per token (a node
belongs to the sequence of every leaf below it), so goose drives ``llama_decode`` itself. The context keeps one
KV cache for every sequence (``kv_unified``: copying a prefix to another sequence is bookkeeping, not data), keeps
windowed layers whole (``swa_full``, so cells of a rejected branch can be dropped and a chat cache cropped), and
hands sequence ids out: each cache holds one for as long as it lives, a tree step borrows the rest for its leaves.

llama-cpp-python is optional (``pip install 'goose-specdec[llamacpp]'``), so it is imported when a model loads.
"""

from __future__ import annotations

import collections
import ctypes
import weakref
from pathlib import Path

import numpy as np

from drafting.engine.llama.settings import LlamaSettings
from drafting.errors import EngineError, ModelError

INSTALL = "make llamacpp-setup (or pip install 'goose-specdec[llamacpp]')"

_LOG_TAIL: collections.deque = collections.deque(maxlen=8)  # llama.cpp's latest warnings and errors
_LOGGER = None  # the ctypes callback, kept alive for as long as llama.cpp may call it


def llama_lib():
    """The ``llama_cpp`` module with its backend started and its log quiet (warnings and errors kept for messages)."""
    global _LOGGER
    try:
        import llama_cpp
    except Exception as exc:  # a broken native library raises OSError, not only ImportError
        raise ModelError(f"The llama.cpp engine needs llama-cpp-python ({INSTALL}); importing it failed: {exc}.") from None
    if _LOGGER is None:
        def keep(level, text, _user):
            if level in (2, 3) and text:  # GGML_LOG_LEVEL_WARN, GGML_LOG_LEVEL_ERROR
                _LOG_TAIL.append(text.decode("utf-8", "replace").strip())

        _LOGGER = llama_cpp.llama_log_callback(keep)
        llama_cpp.llama_log_set(_LOGGER, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
    return llama_cpp


def last_complaint() -> str:
    return _LOG_TAIL[-1] if _LOG_TAIL else ""


def read_not_mapped(lib, params) -> None:
    """Have llama.cpp read the file into its own buffers instead of mapping it: on a CPU it repacks most weights
    into buffers of its own, and a mapping keeps the file's pages resident besides them (Qwen2.5-Coder-1.5B Q4_K_M,
    1.1 GB: 2.4 GB resident mapped, 1.8 GB read). ctypes takes any attribute name silently, so the field is looked
    up: ``load_mode`` in current llama-cpp-python, ``use_mmap`` in older ones."""
    fields = {name for name, *_ in type(params)._fields_}
    if "load_mode" in fields:
        params.load_mode = lib.LLAMA_LOAD_MODE_NONE
    elif "use_mmap" in fields:
        params.use_mmap = False
    else:
        raise ModelError("This llama-cpp-python has neither load_mode nor use_mmap in its model parameters; "
                         f"install the version goose supports ({INSTALL}).")


class LlamaNet:
    """The network the llama.cpp engine runs (``LoadedModel.model``): the model, its context, a reusable batch of
    ``settings.batch`` tokens and the pool of sequence ids. ``close()`` (or the garbage collector) frees them."""

    def __init__(self, path: Path, settings: LlamaSettings):
        lib = self.lib = llama_lib()
        self.path = Path(path)
        self.settings = settings
        mp = lib.llama_model_default_params()
        mp.n_gpu_layers = settings.gpu_layers
        read_not_mapped(lib, mp)
        self.model = lib.llama_model_load_from_file(str(self.path).encode(), mp)
        if not self.model:
            raise ModelError(f"llama.cpp could not load {str(self.path)!r}: {last_complaint() or 'not a model it reads'}.")
        self._free = weakref.finalize(self, _free_all, lib, self.model, [None], [None])
        if lib.llama_model_is_recurrent(self.model) or lib.llama_model_is_hybrid(self.model):
            raise ModelError(f"{self.path.name} is a recurrent model: its state cannot be rolled back to the accepted "
                             "part of a draft, so goose cannot verify drafts on it; run it with plain llama.cpp.")
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        trained = int(lib.llama_model_n_ctx_train(self.model)) or settings.context
        cp = lib.llama_context_default_params()
        cp.n_ctx = min(settings.context, trained)
        cp.n_batch = cp.n_ubatch = settings.batch
        cp.n_seq_max = settings.sequences
        cp.n_threads = cp.n_threads_batch = settings.thread_count
        cp.kv_unified = True
        cp.swa_full = True
        cp.no_perf = True
        self.ctx = lib.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise ModelError(f"llama.cpp could not make a context for {self.path.name}: {last_complaint() or 'no reason given'}.")
        self.memory = lib.llama_get_memory(self.ctx)
        self.n_ctx = int(lib.llama_n_ctx(self.ctx))
        self.batch = lib.llama_batch_init(settings.batch, 0, settings.sequences)
        self._free.detach()
        self._free = weakref.finalize(self, _free_all, lib, self.model, [self.ctx], [self.batch])
        # numpy views of the batch's arrays: a step writes them without a ctypes call per element
        n = settings.batch
        self.tokens = np.ctypeslib.as_array(self.batch.token, shape=(n,))
        self.positions = np.ctypeslib.as_array(self.batch.pos, shape=(n,))
        self.n_seq_ids = np.ctypeslib.as_array(self.batch.n_seq_id, shape=(n,))
        self.wants_logits = np.ctypeslib.as_array(self.batch.logits, shape=(n,))
        self.seq_ids = [np.ctypeslib.as_array(self.batch.seq_id[i], shape=(settings.sequences,)) for i in range(n)]
        self.free_sequences = list(range(settings.sequences - 1, -1, -1))  # popped from the end: 0 first
        self.eos = int(lib.llama_vocab_eos(self.vocab))

    # -- facts ------------------------------------------------------------------------------------------------
    def describe(self) -> str:
        """llama.cpp's own name for the model: architecture, size and file type (``llama ?B Q4_1``)."""
        buf = ctypes.create_string_buffer(256)
        self.lib.llama_model_desc(self.model, buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    def file_type(self) -> str:
        """The weights' type as llama.cpp names it (``Q4_1``, ``Q4_K - Medium``)."""
        parts = self.describe().split(" ", 2)
        return parts[2] if len(parts) == 3 else "GGUF"

    # -- sequences --------------------------------------------------------------------------------------------
    def claim(self, count: int = 1) -> list[int]:
        """``count`` free sequence ids, emptied; EngineError (one sentence) when fewer are free."""
        if count > len(self.free_sequences):
            raise EngineError(f"A llama.cpp step needs {count} sequences and {len(self.free_sequences)} are free "
                              f"(LlamaSettings.sequences = {self.settings.sequences}); draft fewer leaves.")
        out = [self.free_sequences.pop() for _ in range(count)]
        for s in out:
            self.lib.llama_memory_seq_rm(self.memory, s, -1, -1)
        return out

    def release(self, seqs) -> None:
        """Give sequence ids back, dropping their cells (cells another sequence shares stay)."""
        if not self._free.alive:  # closed: the context and its cells are gone
            return
        for s in seqs:
            self.lib.llama_memory_seq_rm(self.memory, s, -1, -1)
            self.free_sequences.append(s)

    # -- one pass -----------------------------------------------------------------------------------------------
    def decode(self, n: int) -> None:
        """Run the batch's first ``n`` tokens (already written into the views); EngineError on failure."""
        self.batch.n_tokens = n
        rc = self.lib.llama_decode(self.ctx, self.batch)
        if rc != 0:
            why = {1: "no room left in the KV cache", 2: "aborted"}.get(rc, f"error {rc}")
            detail = last_complaint()
            raise EngineError(f"llama.cpp could not run a pass of {n} tokens: {why}" + (f" ({detail})." if detail else "."))

    def logits(self, rows: int) -> np.ndarray:
        """The last pass's logits as a (rows, n_vocab) float32 view of llama.cpp's buffer (valid until the next
        pass), in the order the batch asked for them."""
        ptr = self.lib.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(ptr, shape=(rows, self.n_vocab))

    def set_threads(self, n: int) -> None:
        self.lib.llama_set_n_threads(self.ctx, n, n)

    def close(self) -> None:
        self._free()


def _free_all(lib, model, ctx_box, batch_box) -> None:
    if batch_box[0] is not None:
        lib.llama_batch_free(batch_box[0])
    if ctx_box[0]:
        lib.llama_free(ctx_box[0])
    if model:
        lib.llama_model_free(model)
