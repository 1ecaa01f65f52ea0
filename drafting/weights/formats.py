"""Weight formats applied at load time: ``float`` (as loaded, torch's default kernels), ``onednn`` (the same
weights packed for oneDNN, see drafting.weights.onednn), ``dual`` (both: torch's kernel for one-row steps,
oneDNN's for tree steps and prefill), ``mkl`` (float32: torch's kernel for one-row steps, MKL's product over a
weight packed once for more rows, see drafting.weights.mkl), ``int8`` (weight-only int8 layers, bfloat16 between
them), or ``auto``: on a CPU whose torch has oneDNN, in float32 or bfloat16, the fastest of float / onednn / dual
/ mkl as measured on this machine by drafting.weights.probe (cached per machine); elsewhere ``float``. All four
compute the same numbers up to float rounding, so auto never trades exactness for speed; int8 (different
weights) is only used when asked.

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

from drafting.weights import int8 as int8_linear, mkl as mkl_linear, onednn as onednn_linear
from drafting.errors import WeightsError

FORMATS = ("auto", "float", "onednn", "dual", "mkl", "int8")
SAME_NUMBERS = ("float", "onednn", "dual", "mkl")  # the formats auto chooses among (float weights, kernels differ)


def resolve_format(weights: str, device: torch.device, dtype: torch.dtype) -> str:
    """``auto`` -> ``auto`` where a measured choice is possible (a CPU with oneDNN, float32 or bfloat16: the
    loader then runs drafting.weights.probe), else ``float``; anything else is checked and returned."""
    if weights == "auto":
        return "auto" if probe_possible(device, dtype) else "float"
    check_format(weights, device, dtype)
    return weights


def probe_possible(device: torch.device, dtype: torch.dtype) -> bool:
    return device.type == "cpu" and dtype in (torch.float32, torch.bfloat16) and onednn_linear.available()


def check_format(weights: str, device: torch.device, dtype: torch.dtype) -> None:
    if weights not in FORMATS:
        raise WeightsError(f"Unknown weight format {weights!r}; use {', '.join(FORMATS[:-1])} or {FORMATS[-1]}.")
    if weights in ("onednn", "dual"):
        if device.type != "cpu":
            raise WeightsError(f"--weights {weights} packs weights for oneDNN's CPU kernels; use it with --device cpu.")
        if not onednn_linear.available():
            raise WeightsError(f"This torch build has no oneDNN, so --weights {weights} cannot run here.")
    if weights == "mkl":
        if device.type != "cpu" or dtype != torch.float32:
            raise WeightsError("--weights mkl packs float32 weights for MKL's CPU product; use it with --device cpu --dtype float32.")
        if not mkl_linear.available():
            raise WeightsError("This torch build has no MKL packed product that works here, so --weights mkl cannot run.")
    if weights == "int8":
        if device.type != "cpu":
            raise WeightsError("--weights int8 uses torch's CPU int8 kernels; use it with --device cpu.")
        if dtype != torch.bfloat16:
            raise WeightsError("--weights int8 computes in bfloat16 between its int8 weights; use it with --dtype bfloat16 (or auto).")
        if not int8_linear.available():
            raise WeightsError("This torch build has no weight-only int8 CPU kernel, so --weights int8 cannot run here.")


def apply_weights(net: torch.nn.Module, weights: str) -> torch.nn.Module:
    """Return ``net`` with a concrete weight format applied (``float`` returns it unchanged; ``auto`` is
    drafting.weights.probe's measured choice, made once the model is complete)."""
    if weights == "float":
        return net
    replace_linear_layers(net, layer_class(weights))
    if weights == "mkl":
        mkl_linear.cached_split(net)  # which few-row products torch's own call still does faster here
    return net


def format_key(net: torch.nn.Module, weights: str) -> str:
    """The format as caches of its timings tell it apart: its name, and for ``mkl`` the few-row products it
    leaves to torch's call (another split is another speed)."""
    split = mkl_linear.row_split_of(net) if weights == "mkl" else None
    return f"{weights}|torch {split}" if split else weights


def layer_class(weights: str):
    """The layer that replaces ``nn.Linear`` in a concrete non-float format."""
    layer = {"onednn": onednn_linear.OneDNNLinear, "dual": onednn_linear.RowDispatchLinear,
             "mkl": mkl_linear.MKLPackedLinear, "int8": int8_linear.Int8WeightLinear}.get(weights)
    if layer is None:
        raise WeightsError(f"apply_weights needs a concrete weight format, not {weights!r}.")
    return layer


def replace_linear_layers(net: torch.nn.Module, layer) -> torch.nn.Module:
    """Replace every ``nn.Linear`` of ``net`` in place by ``layer(linear)``. A tied output head gets its own
    copy; the embedding keeps the table it reads tokens from."""
    for parent in list(net.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, layer(child))
    return net
