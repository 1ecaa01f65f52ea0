"""What one ``llama_decode`` of n rows costs on this machine for a GGUF re-encoded as other weight types: the
figures behind ``--weights q8_0`` (docs/llama-cpp.md). Each copy is made by llama.cpp's quantiser into a
temporary folder and removed afterwards; rows are timed after a 256-token prompt, median of 7.

    .venv/bin/python -m scripts.llama_types [--model FILE.gguf] [--types q4_1,q8_0,f16,bf16,q4_0]

``own`` (the default first type) is the file as it is. Run it alone: another busy process skews every figure.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from drafting.engine.llama.net import llama_lib, read_not_mapped
from drafting.models.loader import model_source

FTYPES = {"q4_0": 2, "q4_1": 3, "q8_0": 7, "f16": 1, "bf16": 32}  # LLAMA_FTYPE_MOSTLY_*
ROWS = (1, 2, 4, 8, 16, 32)
PREFIX = 256


def copy_as(lib, src: Path, kind: str, folder: Path) -> Path:
    out = folder / f"{src.stem}.{kind}.gguf"
    params = lib.llama_model_quantize_default_params()
    params.ftype, params.allow_requantize, params.nthread = FTYPES[kind], True, 2
    if lib.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(params)) != 0:
        raise SystemExit(f"llama_types: llama.cpp could not re-encode {src.name} as {kind}.")
    return out


def curve(lib, path: Path, threads: int) -> list[float]:
    """Median milliseconds of one decode of each of ROWS rows after PREFIX cached tokens."""
    mp = lib.llama_model_default_params()
    read_not_mapped(lib, mp)
    model = lib.llama_model_load_from_file(str(path).encode(), mp)
    cp = lib.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 1024, 256, 256
    cp.n_threads = cp.n_threads_batch = threads
    ctx = lib.llama_init_from_model(model, cp)
    batch = lib.llama_batch_init(256, 0, 1)
    memory = lib.llama_get_memory(ctx)

    def run(tokens, pos0):
        batch.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = int(t), pos0 + i, 1, 1
            batch.seq_id[i][0] = 0
        t0 = time.perf_counter()
        if lib.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_types: a decode failed.")
        return time.perf_counter() - t0

    rng = np.random.default_rng(0)
    run(rng.integers(100, 5000, PREFIX), 0)
    out = []
    for n in ROWS:
        times = []
        for _ in range(7):
            times.append(run(rng.integers(100, 5000, n), PREFIX))
            lib.llama_memory_seq_rm(memory, 0, PREFIX, -1)
        out.append(1000 * statistics.median(times))
    lib.llama_batch_free(batch)
    lib.llama_free(ctx)
    lib.llama_model_free(model)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a .gguf file or a built-in name; default: the embedded model")
    ap.add_argument("--types", default="own,q8_0,f16,bf16,q4_0", help="own (the file) and llama.cpp types")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    _, src = model_source(args.model)
    if not isinstance(src, Path) or src.suffix != ".gguf":
        raise SystemExit("llama_types: give a .gguf model.")
    lib = llama_lib()
    print(f"{src.name}: ms per llama_decode of n rows after {PREFIX} cached tokens, {args.threads} threads")
    print("| type | " + " | ".join(str(n) for n in ROWS) + " |")
    print("|---" * (len(ROWS) + 1) + "|")
    with tempfile.TemporaryDirectory(prefix="goose-types-") as folder:
        for kind in (k.strip() for k in args.types.split(",") if k.strip()):
            if kind != "own" and kind not in FTYPES:
                raise SystemExit(f"llama_types: unknown type {kind!r}; use own or {', '.join(FTYPES)}.")
            path = src if kind == "own" else copy_as(lib, src, kind, Path(folder))
            print(f"| {kind} | " + " | ".join(f"{ms:.1f}" for ms in curve(lib, path, args.threads)) + " |", flush=True)
            if path != src:
                path.unlink()


if __name__ == "__main__":
    main()
