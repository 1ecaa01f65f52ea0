"""``--weights auto``: the weight format chosen by timing the candidates on this machine, cached per machine.

Which kernel is fastest depends on the CPU: oneDNN's packed matmul won every size on the CPU it was first tuned
on and loses one-row steps on others of the same family. So with ``auto`` the loaded model is timed in each
format that computes the same numbers and runs its own tree kernel (drafting.weights.formats lists them:
``float``, ``onednn`` and, in float32, ``mkl``) for a few forwards at one row (a plain decoding step) and at
``TREE_ROWS`` rows (a typical tree step). The format of plain decoding is the one fastest at one row, never
another; where another kernel is faster for trees, the format that pairs torch's one-row kernel with it
(``dual`` for oneDNN's, ``mkl`` for MKL's packed product) gives tree steps that kernel.

Memory comes first: a format is timed only where the copy of the linear weights it is packed into takes at most
a quarter of the memory available (``COPY_SHARE``), and a format that keeps that copy beside the plain weights
(``dual``, ``mkl``) is chosen only then, so a model that fills much of the machine stays one copy.

The result is cached under the goose cache folder, keyed by a fingerprint of everything that decides it: CPU
model and flags, core count, torch version, thread count, OpenMP settings, the model and its dtype. Any change
makes a new probe. A probe taken while other processes held the cores is kept for a few minutes only (so a
burst of runs on a busy machine does not probe every time), and never replaces an idle machine's probe.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, replace

import torch

from drafting.errors import first_line
from drafting.disk_cache import DiskCache
from drafting.engine.loaded_model import LoadedModel
from drafting.engine.hf import transformers_forward
from drafting.machine.cost_curve import measure
from drafting.machine.identity import device_name, machine_identity
from drafting.machine.load import LoadMeter
from drafting.machine.memory import available_bytes, gib
from drafting.weights.float import FLOAT
from drafting.weights.formats import WEIGHT_FORMATS, apply_format

PROBE_VERSION = 2
TREE_ROWS = 16
PROBE_ROWS = (1, TREE_ROWS)
PROBE_PREFIX = 128
PROBE_REPEATS = 3
BUSY_TTL_S = 600
COPY_SHARE = 4  # a second copy of the weights must fit this many times in the memory available


@dataclass
class FormatChoice:
    dtype: str
    weights: str  # the concrete format chosen
    rows: list[int] = field(default_factory=lambda: list(PROBE_ROWS))
    seconds: dict[str, list[float]] = field(default_factory=dict)  # format -> median seconds per forward at rows
    cached: bool = False  # read from the cache rather than measured in this process
    busy: str | None = None  # why the figures are not trustworthy (then cached for a few minutes only)
    source: str = "probe"  # "probe" or "goose doctor" (its table refreshed it)
    error: str | None = None  # why nothing could be timed (then float, the format as loaded)
    memory: str | None = None  # why formats that need a second copy of the weights were left out


    def describe(self) -> str:
        """One line for headers: what was chosen and the figures behind it."""
        if self.error:
            return f"--weights auto kept float for {self.dtype}: {self.error}"
        figures = ", ".join(
            f"{f} {' / '.join(f'{1000 * s:.1f}' for s in secs)}" for f, secs in self.seconds.items()
        )
        how = "cached" if self.cached else f"measured now by {self.source}"
        text = (f"--weights auto chose {self.weights} for {self.dtype} (ms per forward at "
                f"{' / '.join(map(str, self.rows))} rows: {figures}; {how})")
        text += f"; {self.memory}" if self.memory else ""
        return text + (f"; machine busy while measuring: {self.busy}" if self.busy else "")

    def to_dict(self) -> dict:
        return asdict(self)


def decide(seconds: dict[str, list[float]], two_copies: bool = True) -> str:
    """``seconds``: median seconds per forward at one row and at ``TREE_ROWS`` rows, by timed format. The kernel
    of one-row steps is the fastest at one row among the formats that run one-row steps their own way (a
    trees-only format runs them as float does); tree steps take the kernel fastest at ``TREE_ROWS`` rows where a
    format pairs it with that one-row kernel (float's with oneDNN's: ``dual``; with MKL's packed product:
    ``mkl``), else the one-row format's own. Without ``two_copies``, no format that keeps a second copy of the
    weights (the pairings) is chosen."""
    one_row = min((f for f in seconds if not WEIGHT_FORMATS[f].trees_only), key=lambda f: seconds[f][0])
    trees = min(seconds, key=lambda f: seconds[f][-1])
    return next((f.name for f in WEIGHT_FORMATS.values() if f.same_numbers
                 and (f.one_row_kernel, f.tree_kernel) == (one_row, trees)
                 and (two_copies or not f.keeps_two_copies)), one_row)


def copy_bytes(net: torch.nn.Module) -> int:
    """What a second copy of ``net``'s linear weights takes."""
    return sum(m.weight.numel() * m.weight.element_size() for m in net.modules() if type(m) is torch.nn.Linear)


def no_room_for_a_copy(net: torch.nn.Module) -> str | None:
    """Why a second copy of ``net``'s linear weights does not fit comfortably in the memory available now;
    None where it does (or the system does not say what is available)."""
    need, free = copy_bytes(net), available_bytes()
    if free is None or need * COPY_SHARE <= free:
        return None
    return (f"formats that need a second copy of the weights ({gib(need)}) were left out: "
            f"{gib(free)} of memory is available")


def timed_formats() -> tuple[str, ...]:
    """Every format the probe may time (the doctor's table reads the same rows)."""
    return tuple(name for name, f in WEIGHT_FORMATS.items() if f.timed)


def candidates(dtype: torch.dtype, device: torch.device = torch.device("cpu")) -> tuple[str, ...]:
    """The formats timed for ``dtype`` on ``device``: those of ``timed_formats`` that run there (MKL's packed
    product only in float32, and where it works)."""
    return tuple(name for name in timed_formats() if WEIGHT_FORMATS[name].available(device, dtype))


def fingerprint(net: torch.nn.Module, name: str, device: torch.device, dtype: torch.dtype) -> dict:
    config = net.config.to_json_string() if hasattr(net, "config") else ""
    return {
        "probe": PROBE_VERSION,
        **machine_identity(),
        "model": name,
        "config": hashlib.sha256(config.encode()).hexdigest()[:16],
        "device": device_name(device),
        "dtype": str(dtype).replace("torch.", ""),
    }


def _parse_choice(doc: dict, fp: dict) -> FormatChoice | None:
    """A stored choice, if it was made for exactly this fingerprint."""
    if doc.get("fingerprint") != fp:
        return None
    return FormatChoice(**{**doc["choice"], "cached": True})


# a probe taken on a busy machine shapes the runs of the next minutes, not every later run
PROBE_CACHE = DiskCache("modes", parse=_parse_choice, busy_ttl_s=BUSY_TTL_S)


def cache_path(fp: dict):
    return PROBE_CACHE.path(fp)


def read_cached(fp: dict) -> FormatChoice | None:
    return PROBE_CACHE.read(fp)


def write_cached(fp: dict, choice: FormatChoice) -> None:
    """Store the choice; one measured on a busy machine only for ``BUSY_TTL_S`` (then it is probed again), and
    never in place of a stored choice still good to read."""
    PROBE_CACHE.write(fp, {"fingerprint": fp, "choice": {**choice.to_dict(), "cached": False}},
                      busy=choice.busy is not None)


def probe(net: torch.nn.Module, name: str, device: torch.device, dtype: torch.dtype,
          rows=PROBE_ROWS, prefix: int = PROBE_PREFIX, repeats: int = PROBE_REPEATS) -> FormatChoice:
    """Time ``net`` in every candidate format (leaving it in float) and decide."""
    lm = LoadedModel(make_forward=transformers_forward, model=net, tokenizer=None, name=name, device=device, dtype=dtype)
    slots = _linear_slots(net)
    seconds: dict[str, list[float]] = {}
    memory = no_room_for_a_copy(net)  # every format but float is timed on a packed copy
    meter = LoadMeter().start()
    try:
        for fmt in candidates(dtype):
            if memory and fmt != FLOAT.name:
                continue
            _install(slots, fmt)
            seconds[fmt] = measure(lm, sizes=tuple(rows), prefix=prefix, repeats=repeats).seconds
            _install(slots, FLOAT.name)
            for *_, made in slots:  # one packed copy at a time
                made.pop(fmt, None)
    finally:
        _install(slots, FLOAT.name)
    load = meter.stop()
    dt = str(dtype).replace("torch.", "")
    busy = load.describe() if load is not None and load.busy else None
    return FormatChoice(dtype=dt, weights=decide(seconds), rows=list(rows), seconds=seconds, busy=busy,
                        memory=memory)


def choose_format(net: torch.nn.Module, name: str, device: torch.device, dtype: torch.dtype,
                  refresh: bool = False) -> FormatChoice:
    """The cached choice for this fingerprint, or a new probe (cached unless the machine was busy); the chosen
    format is applied to ``net`` in place."""
    fp = fingerprint(net, name, device, dtype)
    memory = no_room_for_a_copy(net)
    choice = None if refresh else read_cached(fp)
    if choice is not None and choice.memory and not memory:
        choice = None  # a probe that left formats out for memory, where there is room for them now
    if choice is None:
        try:
            choice = probe(net, name, device, dtype)
        except (RuntimeError, ValueError) as exc:  # e.g. a sliding-window cache that cannot roll back a step
            dt = str(dtype).replace("torch.", "")
            return FormatChoice(dtype=dt, weights=FLOAT.name, rows=[],
                                error=f"the probe could not time this model: {first_line(exc)}")
        write_cached(fp, choice)
    if memory and WEIGHT_FORMATS[choice.weights].keeps_two_copies:
        choice = replace(choice, weights=decide(choice.seconds, two_copies=False), memory=memory)
    apply_format(net, choice.weights)
    return choice


def _linear_slots(net: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.nn.Linear, dict]]:
    """Every plain ``nn.Linear`` as (parent, attribute, layer, packed versions by format)."""
    return [(parent, attr, child, {}) for parent in list(net.modules())
            for attr, child in list(parent.named_children()) if type(child) is torch.nn.Linear]


def _install(slots, name: str) -> None:
    """Put format ``name``'s layers in the slots (each made once per slot, then reused)."""
    layer = WEIGHT_FORMATS[name].layer
    for parent, attr, linear, made in slots:
        if layer is None:
            setattr(parent, attr, linear)
            continue
        if name not in made:
            made[name] = layer(linear)
        setattr(parent, attr, made[name])
