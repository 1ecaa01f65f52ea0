"""llama.cpp as an external reference row for benchmarks: ``llama.cpp`` (plain greedy decoding, its own loop:
drafting.baselines.llama_cpp_plain) and ``llama.cpp-pld`` (llama-cpp-python's prompt lookup decoding,
``LlamaPromptLookupDecoding``, 10 tokens, n-grams up to 2; here).

They run the GGUF file itself (the embedded model's, or the --model .gguf given) through ``llama-cpp-python``
(optional: ``pip install .[llamacpp]``) on the same prompt token ids, with the same token limit and EOS rule,
greedy, on the threads goose's llama.cpp engine takes by default (one per physical core); when goose's model is
on a GPU and llama-cpp-python was built with GPU support, llama.cpp offloads every layer to the GPU
(drafting.engine.llama.offload), so GPU goose is compared with GPU llama.cpp, and each row says where it ran
(``device``). Their kernels and quantised weights are not ours, so their outputs are not compared token by token; the
bench reports their tokens/s beside ours. Not registry speculators: the bench knows them by name, like ``hf-pld``.
"""

from __future__ import annotations

import time
from pathlib import Path

from drafting.engine.llama.offload import gpu_layers_beside, offload_device
from drafting.engine.llama.settings import default_threads
from drafting.engine.stop_rules import check_fits
from drafting.engine.decode import GenerationResult
from drafting.models.loader import EMBEDDED_NAME, embedded_gguf
from drafting.engine.loaded_model import LoadedModel

PLAIN = "llama.cpp"
PLD = "llama.cpp-pld"
NAMES = (PLAIN, PLD)
LOOKUP_TOKENS = 10
CONTEXT = 4096  # llama.cpp's window here; prompt lookup keeps logits for every position (4096 x vocab floats)
INSTALL = "pip install 'goose-specdec[llamacpp]'"


class LlamaCppError(ValueError):
    """llama.cpp cannot run here (not installed, or the model is not a GGUF file); one sentence."""


def available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except Exception:  # a broken native library raises OSError, not only ImportError
        return False
    return True


def gguf_path(lm: LoadedModel) -> Path:
    if lm.gguf is not None:  # the file a GGUF-built model (a path, the embedded one, a packaged one) came from
        return lm.gguf
    if lm.name == EMBEDDED_NAME:
        return embedded_gguf()
    if lm.name.endswith(".gguf"):
        return Path(lm.name).expanduser()
    raise LlamaCppError(f"llama.cpp rows need a GGUF model; {lm.name!r} is not a .gguf file.")


class LlamaCppPldRunner:
    """Greedy generation with llama-cpp-python's ``Llama`` class and its prompt lookup drafts."""

    external = True
    same_network = False  # its own kernels on the GGUF's own weights
    model = None
    name = PLD

    def __init__(self, lm: LoadedModel, threads: int | None = None):
        try:
            from llama_cpp import Llama
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        except Exception as exc:
            raise LlamaCppError(f"llama.cpp rows need llama-cpp-python ({INSTALL}); importing it failed: {exc}.") from None
        self.lm = lm
        self.threads = threads or default_threads()
        self.decode_calls = 0
        path = gguf_path(lm)
        gpu_layers = gpu_layers_beside(lm.device)
        self.device = offload_device(gpu_layers).type  # where the row runs
        draft = LlamaPromptLookupDecoding(num_pred_tokens=LOOKUP_TOKENS)
        try:
            self.llm = Llama(
                model_path=str(path), n_ctx=min(lm.max_context, CONTEXT), n_threads=self.threads,
                n_threads_batch=self.threads, draft_model=draft, verbose=False,
                use_mmap=False,  # as goose's own engine reads it (drafting.engine.llama.net): same memory, same speed
                n_gpu_layers=gpu_layers,  # all layers on the GPU when goose uses one and the build can
                # with a draft model it reads logits of every position, but sizes its buffer by logits_all
                logits_all=True,
            )
        except Exception as exc:
            raise LlamaCppError(f"llama.cpp could not load {str(path)!r}: {exc}.") from None
        self.eos = set(lm.eos_ids) | {int(self.llm.token_eos())}
        eval_fn = self.llm.eval

        def counted_eval(tokens):  # one llama.cpp decode call = one forward pass
            self.decode_calls += 1
            return eval_fn(tokens)

        self.llm.eval = counted_eval

    def spec(self) -> str:
        return self.name

    def stats(self) -> dict:
        return {"decode_calls": self.decode_calls}

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> GenerationResult:
        n_ctx = self.llm.n_ctx()
        check_fits(prompt_ids, n_ctx, window="llama.cpp's context of")
        limit = min(max_new_tokens, n_ctx - len(prompt_ids))
        self.llm.reset()  # no reuse of the previous prompt's KV cache: every run pays its own prefill
        out: list[int] = []
        stop = "context" if limit < max_new_tokens else "max_new_tokens"
        t0 = time.perf_counter()
        first = 0.0
        tokens = self.llm.generate(prompt_ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=False)
        try:
            for tok in tokens:
                if not out:
                    first = time.perf_counter() - t0
                out.append(int(tok))
                if tok in self.eos:
                    stop = "eos"
                    break
                if len(out) >= limit:
                    break
        except Exception as exc:  # its Python layer raises plain errors; the bench notes them and goes on
            raise LlamaCppError(f"{self.name} failed after {len(out)} tokens: {exc}") from None
        wall = time.perf_counter() - t0
        return GenerationResult(prompt_ids=list(prompt_ids), output_ids=out, stop_reason=stop, prefill_s=first, wall_s=wall)
