"""The weight formats applied at load time, listed once (each declared in its own file: drafting.weights.float,
onednn, dual, mkl, int8), and ``auto``: on a CPU whose torch has oneDNN, in float32 or bfloat16, the fastest of
the formats that compute the same numbers as float, measured on this machine by drafting.weights.probe (cached
per machine); elsewhere ``float``. Those formats compute the same numbers up to float rounding, so auto never
trades exactness for speed; a format with other weights (int8) is only used when asked.

``int8`` replaces every ``nn.Linear`` with a weight-only int8 layer (drafting.weights.int8): int8 weights, one
scale per output channel, bfloat16 activations. It is applied inside ``load_model`` so plain decoding and every
speculator verify with the same network; it reads a quarter of float32's bytes per step, which is what a one-token
step on a CPU waits for (docs/measurements.md). Being bfloat16 between its layers, it is a low-precision mode
("identical up to ties"), like bf16.

Dynamically quantised int8 layers (torch's ``quantize_dynamic``: activations rounded to int8 too) were built and
measured first: faster for wide trees but not identical to plain decoding even up to ties. The float32 parts of a
tree pass (attention, norms) differ from a one-row pass by float rounding, enough to move an activation across an
int8 rounding boundary, and such flips grow layer by layer (per-row activation scales did not help). A format
that breaks the lossless promise is not offered.
"""

from __future__ import annotations

import torch

from drafting.errors import WeightsError
from drafting.weights.dual import DUAL
from drafting.weights.float import FLOAT
from drafting.weights.int8 import INT8
from drafting.weights.mkl import MKL
from drafting.weights.onednn import ONEDNN, available as onednn_available
from drafting.weights.weight_format import WeightFormat

WEIGHT_FORMATS: dict[str, WeightFormat] = {f.name: f for f in (FLOAT, ONEDNN, DUAL, MKL, INT8)}
AUTO = "auto"  # not a format: the measured choice among those that compute float's numbers
SAME_NUMBERS = tuple(name for name, f in WEIGHT_FORMATS.items() if f.same_numbers)
CHOICES = (AUTO, *WEIGHT_FORMATS)  # what --weights takes
PROBE_DTYPES = (torch.float32, torch.bfloat16)  # where auto measures a choice (on a CPU with oneDNN)


def weight_format(name: str) -> WeightFormat:
    """The concrete format called ``name``; ``WeightsError`` (one sentence) for any other name."""
    if name not in WEIGHT_FORMATS:
        raise WeightsError(f"Unknown weight format {name!r}; use {', '.join(CHOICES[:-1])} or {CHOICES[-1]}.")
    return WEIGHT_FORMATS[name]


def one_of(names) -> str:
    """``a / b / c``: how the help texts list formats."""
    return " / ".join(names)


def weights_help() -> str:
    """The ``--weights`` option's help: auto, then every format with its few words."""
    dtypes = " or ".join(str(dt).replace("torch.", "") for dt in PROBE_DTYPES)
    auto = (f"on CPU, in {dtypes}, the fastest of {one_of(SAME_NUMBERS)} timed on this machine once and "
            f"cached; else {FLOAT.name}")
    items = [f"{AUTO} ({auto})"] + [f"{f.name} ({f.help})" for f in WEIGHT_FORMATS.values()]
    llama = ("On --engine llama.cpp: auto (the GGUF's own weights) or q8_0 (a Q8_0 copy of a 4-to-6-bit GGUF, made "
             "once and cached: on x86 a Q4_1 file's copy prefills twice as fast; `goose doctor --engine llama.cpp` "
             "times both; outputs up to near-ties).")
    return f"Weight format: {', '.join(items[:-1])} or {items[-1]}. {llama}"


def resolve_format(name: str, device: torch.device, dtype: torch.dtype) -> str:
    """``auto`` -> ``auto`` where a measured choice is possible (a CPU with oneDNN, float32 or bfloat16: the
    loader then runs drafting.weights.probe), else ``float``; anything else is checked and returned."""
    if name == AUTO:
        return AUTO if probe_possible(device, dtype) else FLOAT.name
    check_format(name, device, dtype)
    return name


def probe_possible(device: torch.device, dtype: torch.dtype) -> bool:
    return device.type == "cpu" and dtype in PROBE_DTYPES and onednn_available()


def check_format(name: str, device: torch.device, dtype: torch.dtype) -> None:
    """``WeightsError`` (one sentence) unless ``name`` is ``auto`` or a format that runs on ``device`` in ``dtype``."""
    if name != AUTO:
        weight_format(name).check(device, dtype)


def apply_format(net: torch.nn.Module, name: str) -> torch.nn.Module:
    """Return ``net`` with the concrete weight format ``name`` applied (``float`` returns it unchanged; ``auto``
    is drafting.weights.probe's measured choice, made once the model is complete)."""
    if name not in WEIGHT_FORMATS:
        raise WeightsError(f"apply_format needs a concrete weight format, not {name!r}.")
    fmt = WEIGHT_FORMATS[name]
    if fmt.layer is not None:
        replace_linear_layers(net, fmt.layer)
    if fmt.prepare is not None:
        fmt.prepare(net)
    return net


def format_key(net: torch.nn.Module, name: str) -> str:
    """The format as caches of its timings tell it apart: its name, and what it adds for ``net`` (``mkl``: the
    few-row products it leaves to torch's call, since another split is another speed)."""
    return weight_format(name).key(net)


def replace_linear_layers(net: torch.nn.Module, layer) -> torch.nn.Module:
    """Replace every ``nn.Linear`` of ``net`` in place by ``layer(linear)``. A tied output head gets its own
    copy; the embedding keeps the table it reads tokens from."""
    for parent in list(net.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, layer(child))
    return net
