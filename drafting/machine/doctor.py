"""Which precision and weight format is fastest for a model on this device: one-token step time, prefill
speed and the verification cost curve for each mode, measured side by side (``goose doctor``).

Algorithm-free: it only loads the model in each mode and times forwards with ``drafting.machine.cost_curve.measure``. A
mode measured with the default prefix and the full curve also refreshes the cached cost curve that tree
budgets read, so the budget of a later run matches the mode it runs in.

``profile_modes`` respects the user's time and reports honestly: a mode more than ``GIVE_UP`` times slower than
the fastest one-row step seen so far is timed once and not further, and every mode is measured under a load
meter and followed by a quick calibration, so a machine that other processes keep busy is noticed (the caller
says so instead of printing figures far off this machine's speed).
"""

from __future__ import annotations

import gc
import time
from dataclasses import asdict, dataclass, field

import torch

from drafting.engine.forward import TRANSFORMERS
from drafting.engine.llama.reencode import FORMATS as REENCODINGS
from drafting.engine.loaded_model import mode_name
from drafting.errors import ModelError, WeightsError, first_line
from drafting.machine.cost_curve import DEFAULT_SIZES, measure, store_curve
from drafting.machine.load import LoadMeter, calibrate
from drafting.models.loader import DTYPES, load_model, resolve_device, resolve_dtype
from drafting.weights.float import FLOAT
from drafting.weights.formats import AUTO, SAME_NUMBERS, WEIGHT_FORMATS, one_of, weight_format
from drafting.weights.probe import TREE_ROWS, FormatChoice, decide, fingerprint, timed_formats

DEFAULT_PREFIX = 256
QUICK_SIZES = (1, 4, 16)  # the doctor's default: a plain step, a small and a typical tree
GIVE_UP = 5.0  # a mode this many times slower than the fastest one-row step seen is not timed further
SLOWDOWN = 2.0  # a calibration this many times slower than the first one: the machine got busy


@dataclass
class Mode:
    """A dtype and a weight format: what one row of the doctor's table loads and times."""

    dtype: str
    weights: str = FLOAT.name
    engine: str = TRANSFORMERS  # on llama.cpp: dtype auto, weights auto (the file's own) or a re-encoding (q8_0)

    @property
    def label(self) -> str:
        return mode_name(self.dtype, self.weights) if self.engine == TRANSFORMERS else self.engine


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
    gave_up: str | None = None  # why it was timed once only (far slower than the fastest)
    busy: str | None = None  # what the load meter or calibration saw while it was measured
    fingerprint: dict | None = None  # the machine fingerprint (drafting.weights.probe) of a float mode

    @property
    def step_s(self) -> float:
        return self.seconds[0] if self.seconds else float("nan")

    def to_dict(self) -> dict:
        return {**asdict(self), "step_s": self.step_s if self.seconds else None}


def dtype_names(device: torch.device) -> list[str]:
    """float16 only pays on GPUs (CPUs have no fast fp16 matmul), so it is offered on CUDA only."""
    return ["float32", "bfloat16"] + (["float16"] if device.type == "cuda" else [])


def available_modes(device: torch.device) -> list[Mode]:
    """Every dtype with every weight format that runs in it on ``device`` (``auto`` is a choice among those, not
    a mode of its own)."""
    return [Mode(dt, name) for dt in dtype_names(device) for name, fmt in WEIGHT_FORMATS.items()
            if fmt.available(device, DTYPES[dt])]


def parse_modes(text: str | None, device: torch.device) -> list[Mode]:
    """``float32,bfloat16,bfloat16+int8`` -> modes; None or ``all`` = every mode available on the device."""
    if text is None or text.strip() == "all":
        return available_modes(device)
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        dt, _, w = part.partition("+")
        w = w or FLOAT.name
        if w == AUTO:
            raise ModelError(f"Mode {part!r}: name a concrete weight format ({', '.join(WEIGHT_FORMATS)}).")
        if dt not in DTYPES:
            raise ModelError(f"Unknown dtype {dt!r} in mode {part!r}; use float32, bfloat16 or float16.")
        try:
            weight_format(w).check(device, DTYPES[dt])
        except WeightsError as exc:
            raise ModelError(f"Mode {part!r} cannot run here: {exc}") from None
        out.append(Mode(dt, w))
    if not out:
        raise ModelError("No mode given; name at least one, e.g. float32,bfloat16,bfloat16+int8.")
    return out


def engine_modes(text: str | None, engine: str) -> list[Mode]:
    """The modes of an engine that runs GGUF files itself (llama.cpp): ``auto`` (the file's own weights) and its
    re-encodings (``q8_0``); None = all of them."""
    names = [AUTO, *REENCODINGS]
    asked = names if text is None or text.strip() == "all" else [p.strip() for p in text.split(",") if p.strip()]
    for name in asked:
        if name not in names:
            raise ModelError(f"Unknown {engine} mode {name!r}; use {' or '.join(names)} (the transformers engine's "
                             "dtypes and weight formats do not apply to it).")
    if not asked:
        raise ModelError(f"No mode given; name at least one of {', '.join(names)}.")
    return [Mode(AUTO, name, engine) for name in dict.fromkeys(asked)]


def auto_choice(device: str) -> tuple[str, str]:
    """What ``--dtype auto`` resolves to on ``device`` and why (one sentence)."""
    dev = resolve_device(device)
    dt = str(resolve_dtype("auto", dev)).replace("torch.", "")
    if dev.type == "cuda":
        return dt, "on CUDA auto picks bfloat16: tensor cores make it much faster than float32; outputs are identical to `ar` up to near-ties."
    return dt, ("on CPU auto picks float32, the exact-reference mode whose tree verification matches plain decoding "
                f"token for token; --weights auto then takes the fastest of {one_of(SAME_NUMBERS)} measured here.")


def format_choices(profiles: list["ModeProfile"]):
    """``--weights auto``'s choice per dtype from this table: drafting.weights.probe.decide over the rows of the
    formats the probe times, at one row and the largest size up to the probe's tree size, as (fingerprint,
    FormatChoice). A dtype lacks one where a format that runs one-row steps its own way was not fully timed."""
    timed = timed_formats()
    needed = [w for w in timed if not WEIGHT_FORMATS[w].trees_only]
    out = []
    for dt in dict.fromkeys(p.dtype for p in profiles):
        rows = {p.weights: p for p in profiles if p.dtype == dt and p.weights in timed
                and p.error is None and p.gave_up is None and p.seconds}
        if not all(w in rows for w in needed):
            continue
        sizes = [n for n in rows[FLOAT.name].sizes if all(n in p.sizes for p in rows.values()) and n <= TREE_ROWS]
        at = [1, sizes[-1]] if sizes and sizes[-1] > 1 else [1]
        seconds = {w: [p.seconds[p.sizes.index(n)] for n in at] for w, p in rows.items()}
        busy = next((p.busy for p in rows.values() if p.busy), None)
        out.append((rows[FLOAT.name].fingerprint, FormatChoice(dtype=dt, weights=decide(seconds), rows=at,
                                                               seconds=seconds, busy=busy, source="goose doctor")))
    return out


def profile_mode(model: str | None, device: str, mode: Mode, sizes=DEFAULT_SIZES, prefix: int = DEFAULT_PREFIX,
                 repeats: int = 3, limit_s: float | None = None, loader=load_model) -> ModeProfile:
    """Load the model in ``mode`` and time it; a failure is kept as ``error`` (one sentence), not raised. A
    one-row step slower than ``limit_s`` is timed once and the rest skipped (``gave_up``)."""
    out = ModeProfile(mode=mode.label, dtype=mode.dtype, weights=mode.weights)
    lm = None
    try:
        t0 = time.perf_counter()
        lm = loader(model, device=device, dtype=mode.dtype, weights=mode.weights)
        out.load_s = time.perf_counter() - t0
        if lm.engine != TRANSFORMERS:
            out.mode = lm.mode  # the engine and the weights' type it found in the file
        if mode.weights == FLOAT.name:
            out.fingerprint = fingerprint(lm.model, lm.name, lm.device, lm.dtype)
        with LoadMeter() as meter:
            curve = measure(lm, sizes=tuple(sizes), prefix=prefix, repeats=repeats, limit_s=limit_s)
        out.sizes, out.seconds = list(curve.sizes), list(curve.seconds)
        if len(curve.seconds) < len(sizes):
            out.gave_up = f"more than {GIVE_UP:g}x slower than the fastest one-row step; not timed further"
        else:
            full = tuple(sizes) == DEFAULT_SIZES and prefix == DEFAULT_PREFIX and repeats == 3
            if full and (meter.load is None or not meter.load.busy):
                store_curve(lm, prefix, curve)  # also what tree budgets will read
            out.prefill_tokens_per_s = _prefill_speed(lm, prefix)
    except ModelError as exc:
        out.error = str(exc)
    except RuntimeError as exc:  # a kernel missing for this dtype on this device
        out.error = f"{mode.label} failed on this device: {first_line(exc)}"
    finally:
        del lm
        gc.collect()
    return out


def _prefill_speed(lm, n: int) -> float:
    """Tokens per second of a causal prefill of ``n`` tokens (second run; the first warms up)."""
    ids = [100 + (i * 7919) % max(1, min(lm.vocab_size, 32000) - 100) for i in range(n)]
    fwd = lm.make_forward(lm, None)
    best = float("inf")
    for _ in range(2):
        cache = fwd.new_cache()
        t0 = fwd.clock.mark()
        fwd.prefill(ids, cache, logit_rows=1)  # as a plain decode's prefill: the last position's logits only
        t1 = fwd.clock.mark()
        fwd.clock.settle()
        best = min(best, fwd.clock.seconds(t0, t1))
    return n / best


def fastest(profiles: list[ModeProfile]) -> ModeProfile | None:
    ok = [p for p in profiles if p.error is None and p.seconds]
    return min(ok, key=lambda p: p.step_s) if ok else None


def profile_modes(model: str | None, device: str, modes: list[Mode], sizes=QUICK_SIZES,
                  prefix: int = DEFAULT_PREFIX, repeats: int = 3, stop_when_busy: bool = True, loader=load_model,
                  on_mode=None) -> tuple[list[ModeProfile], str | None]:
    """Profile every mode in turn; returns (profiles, why the machine looks busy or None). A busy machine
    ends the run after the mode that showed it, unless ``stop_when_busy`` is False. ``on_mode(mode)`` is
    called before each mode (progress)."""
    base = calibrate()
    profiles: list[ModeProfile] = []
    busy = None
    for m in modes:
        if on_mode is not None:
            on_mode(m)
        best = fastest(profiles)
        limit = GIVE_UP * best.step_s if best is not None else None
        with LoadMeter() as meter:
            p = profile_mode(model, device, m, sizes=sizes, prefix=prefix, repeats=repeats, limit_s=limit,
                             loader=loader)
        now = calibrate()
        if meter.load is not None and meter.load.busy:
            p.busy = meter.load.describe()
        elif now > SLOWDOWN * base:
            p.busy = f"a fixed matrix product ran {now / base:.1f}x slower than at the start"
        base = min(base, now)
        profiles.append(p)
        if p.busy and busy is None:
            busy = f"while measuring {p.mode}, {p.busy}"
            if stop_when_busy:
                break
    return profiles, busy
