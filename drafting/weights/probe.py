"""``--weights auto``: the weight format chosen by timing the candidates on this machine, cached per machine.

Which kernel is fastest depends on the CPU: oneDNN's packed matmul won every size on the CPU it was first tuned
on and loses one-row steps on others of the same family. So with ``auto`` the loaded model is timed in each
format that computes the same numbers (``float``, ``onednn`` and, in float32, ``mkl``; see drafting.weights.formats)
for a few forwards at one row (a plain decoding step) and at ``TREE_ROWS`` rows (a typical tree step). The
format of plain decoding is the one fastest at one row, never another; where another kernel is faster for
trees, ``dual`` (oneDNN's) or ``mkl`` (MKL's packed product) gives tree steps that kernel while one-row steps
keep torch's.

The result is cached under the goose cache folder, keyed by a fingerprint of everything that decides it: CPU
model and flags, core count, torch version, thread count, OpenMP settings, the model and its dtype. Any change
makes a new probe. A probe taken while other processes held the cores is kept for a few minutes only (so a
burst of runs on a busy machine does not probe every time), and never replaces an idle machine's probe.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field

import torch
from drafting.machine.identity import machine_identity

PROBE_VERSION = 2
TREE_ROWS = 16
PROBE_ROWS = (1, TREE_ROWS)
PROBE_PREFIX = 128
PROBE_REPEATS = 3
BUSY_TTL_S = 600
CANDIDATES = ("float", "onednn")  # same numbers, different kernels; `dual` combines them
TREE_ONLY = ("mkl",)  # one-row steps in torch's kernel (float's), trees in another: timed for trees


@dataclass
class ModeChoice:
    dtype: str
    weights: str  # the concrete format chosen
    rows: list[int] = field(default_factory=lambda: list(PROBE_ROWS))
    seconds: dict[str, list[float]] = field(default_factory=dict)  # format -> median seconds per forward at rows
    cached: bool = False  # read from the cache rather than measured in this process
    busy: str | None = None  # why the figures are not trustworthy (then not cached)
    source: str = "probe"  # "probe" or "doctor" (goose doctor's table refreshed it)
    error: str | None = None  # why nothing could be timed (then float, the format as loaded)

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
        return text + (f"; machine busy while measuring: {self.busy}" if self.busy else "")

    def to_dict(self) -> dict:
        return asdict(self)


def decide(seconds: dict[str, list[float]]) -> str:
    """The kernel for one-row steps is the fastest of float and onednn at one row; with float's, trees take
    another kernel only where it is faster at ``TREE_ROWS`` rows (oneDNN's: ``dual``; MKL's packed: ``mkl``)."""
    one_row = min((f for f in seconds if f in CANDIDATES), key=lambda f: seconds[f][0])
    if one_row != "float":
        return one_row
    trees = min(seconds, key=lambda f: seconds[f][-1])
    return {"onednn": "dual"}.get(trees, trees)


def candidates(dtype: torch.dtype) -> tuple[str, ...]:
    """The formats timed for ``dtype``: float and onednn, and mkl in float32 where MKL's packed product works."""
    from drafting.weights import mkl as mkl_linear

    extra = TREE_ONLY if dtype == torch.float32 and mkl_linear.available() else ()
    return CANDIDATES + extra


def fingerprint(net: torch.nn.Module, name: str, device: torch.device, dtype: torch.dtype) -> dict:
    config = net.config.to_json_string() if hasattr(net, "config") else ""
    return {
        "probe": PROBE_VERSION,
        **machine_identity(),
        "model": name,
        "config": hashlib.sha256(config.encode()).hexdigest()[:16],
        "device": str(device),
        "dtype": str(dtype).replace("torch.", ""),
    }


def cache_path(fp: dict):
    from drafting.disk_cache import cache_dir

    key = hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / "modes" / f"{key}.json"


def read_cached(fp: dict) -> ModeChoice | None:
    path = cache_path(fp)
    try:
        doc = json.loads(path.read_text())
        if doc.get("fingerprint") != fp:
            return None
        choice = ModeChoice(**doc["choice"])
        if choice.busy and time.time() - float(doc.get("written", 0)) > BUSY_TTL_S:
            return None  # measured on a busy machine: good for a few minutes of runs, then probed again
    except (OSError, ValueError, TypeError, KeyError):
        return None
    choice.cached = True
    return choice


def write_cached(fp: dict, choice: ModeChoice) -> None:
    """Store the choice; one measured on a busy machine only for ``BUSY_TTL_S`` (then it is probed again), so
    it shapes the runs of the next minutes, not every later run, and a stored idle choice is never replaced by it."""
    path = cache_path(fp)
    if choice.busy and read_cached(fp) is not None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"fingerprint": fp, "choice": {**choice.to_dict(), "cached": False}, "written": time.time()}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass  # the cache is a convenience; the choice still holds for this run


def probe(net: torch.nn.Module, name: str, device: torch.device, dtype: torch.dtype,
          rows=PROBE_ROWS, prefix: int = PROBE_PREFIX, repeats: int = PROBE_REPEATS) -> ModeChoice:
    """Time ``net`` in every candidate format (leaving it in float) and decide."""
    from drafting.machine.cost_curve import measure
    from drafting.machine.load import LoadMeter
    from drafting.engine.loaded_model import LoadedModel

    lm = LoadedModel(model=net, tokenizer=None, name=name, device=device, dtype=dtype)
    slots = _linear_slots(net)
    seconds: dict[str, list[float]] = {}
    meter = LoadMeter().start()
    try:
        for fmt in candidates(dtype):
            _install(slots, fmt)
            seconds[fmt] = measure(lm, sizes=tuple(rows), prefix=prefix, repeats=repeats).seconds
    finally:
        _install(slots, "float")
    load = meter.stop()
    dt = str(dtype).replace("torch.", "")
    busy = load.describe() if load is not None and load.busy else None
    return ModeChoice(dtype=dt, weights=decide(seconds), rows=list(rows), seconds=seconds, busy=busy)


def choose_weights(net: torch.nn.Module, name: str, device: torch.device, dtype: torch.dtype,
                   refresh: bool = False) -> ModeChoice:
    """The cached choice for this fingerprint, or a new probe (cached unless the machine was busy); the chosen
    format is applied to ``net`` in place."""
    from drafting.weights.formats import apply_weights

    fp = fingerprint(net, name, device, dtype)
    choice = None if refresh else read_cached(fp)
    if choice is None:
        try:
            choice = probe(net, name, device, dtype)
        except (RuntimeError, ValueError) as exc:  # e.g. a sliding-window cache that cannot roll back a step
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            dt = str(dtype).replace("torch.", "")
            return ModeChoice(dtype=dt, weights="float", rows=[], error=f"the probe could not time this model: {first}")
        write_cached(fp, choice)
    apply_weights(net, choice.weights)
    return choice


def _linear_slots(net: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.nn.Linear, dict]]:
    """Every plain ``nn.Linear`` as (parent, attribute, layer, packed versions by format)."""
    return [(parent, attr, child, {}) for parent in list(net.modules())
            for attr, child in list(parent.named_children()) if type(child) is torch.nn.Linear]


def _install(slots, fmt: str) -> None:
    from drafting.weights.formats import layer_class

    for parent, attr, linear, made in slots:
        if fmt == "float":
            setattr(parent, attr, linear)
            continue
        if fmt not in made:
            made[fmt] = layer_class(fmt)(linear)
        setattr(parent, attr, made[fmt])
