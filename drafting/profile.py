"""Which precision and weight format is fastest for a model on this device: one-token step time, prefill
speed and the verification cost curve for each mode, measured side by side (``goose doctor``).

Algorithm-free: it only loads the model in each mode and times forwards with ``drafting.cost.measure``. A
mode measured with the default prefix also refreshes the cached cost curve that tree budgets read, so the
budget of a later run matches the mode it runs in.
"""

from __future__ import annotations

import gc
import time
from dataclasses import asdict, dataclass, field

import torch

from .cost import DEFAULT_SIZES, cost_curve, measure
from .model import DTYPES, ModelError, load_model, resolve_device, resolve_dtype
from .verify import Forward
from .weights import FORMATS, WeightsError, check_format

DEFAULT_PREFIX = 256


@dataclass
class Mode:
    dtype: str
    weights: str = "float"

    @property
    def label(self) -> str:
        return self.dtype if self.weights == "float" else f"{self.dtype}+{self.weights}"


@dataclass
class ModeProfile:
    mode: str
    dtype: str
    weights: str
    load_s: float = 0.0
    prefill_tokens_per_s: float = 0.0
    sizes: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # median seconds of one forward with that many rows
    error: str | None = None  # why this mode could not be measured

    @property
    def step_s(self) -> float:
        return self.seconds[0] if self.seconds else float("nan")

    def to_dict(self) -> dict:
        return {**asdict(self), "step_s": self.step_s if self.seconds else None}


def dtype_names(device: torch.device) -> list[str]:
    """float16 only pays on GPUs (CPUs have no fast fp16 matmul), so it is offered on CUDA only."""
    return ["float32", "bfloat16"] + (["float16"] if device.type == "cuda" else [])


def available_modes(device: torch.device) -> list[Mode]:
    modes = []
    for dt in dtype_names(device):
        for w in FORMATS:
            if w == "auto":  # a choice among the others, not a mode of its own
                continue
            try:
                check_format(w, device, DTYPES[dt])
            except WeightsError:
                continue
            modes.append(Mode(dt, w))
    return modes


def parse_modes(text: str | None, device: torch.device) -> list[Mode]:
    """``float32,bfloat16,bfloat16+int8`` -> modes; None or ``all`` = every mode available on the device."""
    if text is None or text.strip() == "all":
        return available_modes(device)
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        dt, _, w = part.partition("+")
        w = w or "float"
        if w == "auto":
            raise ModelError(f"Mode {part!r}: name a concrete weight format ({', '.join(f for f in FORMATS if f != 'auto')}).")
        if dt not in DTYPES:
            raise ModelError(f"Unknown dtype {dt!r} in mode {part!r}; use float32, bfloat16 or float16.")
        try:
            check_format(w, device, DTYPES[dt])
        except WeightsError as exc:
            raise ModelError(f"Mode {part!r} cannot run here: {exc}") from None
        out.append(Mode(dt, w))
    if not out:
        raise ModelError("No mode given; name at least one, e.g. float32,bfloat16,bfloat16+int8.")
    return out


def auto_choice(device: str) -> tuple[str, str]:
    """What ``--dtype auto`` resolves to on ``device`` and why (one sentence)."""
    dev = resolve_device(device)
    dt = str(resolve_dtype("auto", dev)).replace("torch.", "")
    if dev.type == "cuda":
        return dt, "on CUDA auto picks bfloat16: tensor cores make it much faster than float32; outputs are identical to `ar` up to near-ties."
    return dt, "on CPU auto picks float32 (with oneDNN-packed weights), the exact-reference mode whose tree verification matches plain decoding token for token; faster modes are opt-in."


def profile_mode(model: str | None, device: str, mode: Mode, sizes=DEFAULT_SIZES, prefix: int = DEFAULT_PREFIX,
                 repeats: int = 3) -> ModeProfile:
    """Load the model in ``mode`` and time it; a failure is kept as ``error`` (one sentence), not raised."""
    out = ModeProfile(mode=mode.label, dtype=mode.dtype, weights=mode.weights)
    lm = None
    try:
        t0 = time.perf_counter()
        lm = load_model(model, device=device, dtype=mode.dtype, weights=mode.weights)
        out.load_s = time.perf_counter() - t0
        out.prefill_tokens_per_s = _prefill_speed(lm, prefix)
        if tuple(sizes) == DEFAULT_SIZES and prefix == DEFAULT_PREFIX and repeats == 3:
            curve = cost_curve(lm, prefix=prefix, refresh=True)  # also what tree budgets will read
        else:
            curve = measure(lm, sizes=tuple(sizes), prefix=prefix, repeats=repeats)
        out.sizes, out.seconds = list(curve.sizes), list(curve.seconds)
    except ModelError as exc:
        out.error = str(exc)
    except RuntimeError as exc:  # a kernel missing for this dtype on this device
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        out.error = f"{mode.label} failed on this device: {first}"
    finally:
        del lm
        gc.collect()
    return out


def _prefill_speed(lm, n: int) -> float:
    """Tokens per second of a causal prefill of ``n`` tokens (second run; the first warms up)."""
    from .kv_cache import new_cache

    ids = [100 + (i * 7919) % max(1, min(lm.vocab_size, 32000) - 100) for i in range(n)]
    fwd = Forward(lm.model, lm.dtype, lm.device)
    best = float("inf")
    for _ in range(2):
        cache = new_cache(lm.model.config)
        t0 = time.perf_counter()
        fwd.prefill(ids, cache)
        if lm.device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return n / best


def fastest(profiles: list[ModeProfile]) -> ModeProfile | None:
    ok = [p for p in profiles if p.error is None and p.seconds]
    return min(ok, key=lambda p: p.step_s) if ok else None
