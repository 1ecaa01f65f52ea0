"""Weight formats applied at load time: ``float`` (as loaded, torch's default kernels), ``onednn`` (the same
float weights pre-packed for oneDNN, see drafting.onednn_linear), ``int8`` (dynamic int8 Linear layers), or
``auto``: ``onednn`` for float32 on a CPU whose torch has oneDNN (faster and no less exact), else ``float``.

``int8`` replaces every ``nn.Linear`` with torch's dynamically quantised version (int8 weights, activations
quantised per call, fbgemm/onednn CPU kernels). It is applied inside ``load_model`` so plain decoding and
every speculator verify with the same network; measured on a 2-core AVX-512 CPU with SmolLM2-135M it cut a
one-token step from ~38 ms (fp32) / ~22 ms (bf16) to ~13 ms. The activation scale is computed over all rows
of a call, so a tree pass rounds differently from a one-row pass: int8 is a low-precision mode ("identical up
to ties"), like bf16. Per-row activation scales were built and measured and do not fix it: float32 attention and
norms already differ by ~1e-7 between a one-row and a tree pass, which is enough to move an activation across an
int8 rounding boundary, and such flips grow layer by layer (logits ~4 apart at the end on SmolLM2-135M).
torch's weight-only int8 kernel (``_weight_int8pack_mm``) was measured too: ~15 ms a
step in bf16 but 3-4x steeper with more rows, so it is not offered.
"""

from __future__ import annotations

import warnings

import torch

from . import onednn_linear

FORMATS = ("auto", "float", "onednn", "int8")


class WeightsError(ValueError):
    """A weight format cannot be used with this model, device or dtype; one sentence."""


def resolve_format(weights: str, device: torch.device, dtype: torch.dtype) -> str:
    """``auto`` -> the concrete format for this device and dtype; anything else is checked and returned."""
    if weights == "auto":
        fast = device.type == "cpu" and dtype == torch.float32 and onednn_linear.available()
        return "onednn" if fast else "float"
    check_format(weights, device, dtype)
    return weights


def check_format(weights: str, device: torch.device, dtype: torch.dtype) -> None:
    if weights not in FORMATS:
        raise WeightsError(f"Unknown weight format {weights!r}; use {', '.join(FORMATS[:-1])} or {FORMATS[-1]}.")
    if weights == "onednn":
        if device.type != "cpu":
            raise WeightsError("--weights onednn packs weights for oneDNN's CPU kernels; use it with --device cpu.")
        if not onednn_linear.available():
            raise WeightsError("This torch build has no oneDNN, so --weights onednn cannot run here.")
    if weights == "int8":
        if device.type != "cpu":
            raise WeightsError("--weights int8 uses torch's CPU int8 kernels; use it with --device cpu.")
        if dtype != torch.float32:
            raise WeightsError("--weights int8 computes in float32 between its int8 layers; use it with --dtype float32 (or auto).")
        if not torch.backends.quantized.supported_engines or torch.backends.quantized.supported_engines == ["none"]:
            raise WeightsError("This torch build has no quantised CPU engine, so --weights int8 cannot run here.")


def apply_weights(net: torch.nn.Module, weights: str) -> torch.nn.Module:
    """Return ``net`` with a concrete weight format applied (``float`` returns it unchanged; resolve ``auto``
    with ``resolve_format`` first, which knows the device and dtype)."""
    if weights == "float":
        return net
    if weights == "onednn":
        return onednn_linear.pack_linear_layers(net)
    if weights != "int8":
        raise WeightsError(f"apply_weights needs a concrete weight format, not {weights!r}.")
    with warnings.catch_warnings():  # torch announces the move of eager quantisation to torchao on every call
        warnings.simplefilter("ignore")
        from torch.ao.quantization import quantize_dynamic

        return quantize_dynamic(net, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
