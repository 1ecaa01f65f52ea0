"""``onednn``: Linear layers whose weight is pre-packed for oneDNN's CPU matmul (same float weights, faster kernel).

torch's default float32 Linear (MKL) is fast for one row but falls off its matrix-vector path from two rows on,
so a tree step costs much more than a one-token step. Here the weight is reordered once into oneDNN's matmul
layout (``_reorder_linear_weight``) and multiplied with ``_linear_pointwise``, which takes and returns ordinary
tensors: the cost grows slowly with the rows, and the flatter the curve, the more a tree verification can hold.
The weight is not kept as an opaque oneDNN tensor (``to_mkldnn``): converting every activation to and from
oneDNN's layout was a sizeable share of a forward. Each row of a batch matches the same row computed alone to
float rounding, as with the default kernels. In bfloat16 the same packing gives the very numbers of torch's own
bf16 Linear, faster, since torch's path re-packs the weight on every call. Figures: docs/measurements.md.
"""

from __future__ import annotations

import torch

from drafting.weights.base import LinearStandIn
from drafting.weights.weight_format import WeightFormat


class OneDNNLinear(LinearStandIn):
    """Drop-in for ``nn.Linear`` in inference: holds only the packed weight (and the bias, dense)."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__(linear)
        self.register_buffer("packed", torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach()),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, shape[-1]), self.packed, self.bias, "none", [], "")
        return y.reshape(*shape[:-1], self.out_features)


def available() -> bool:
    return torch.backends.mkldnn.is_available()


def packs_bfloat16() -> bool:
    """oneDNN packs bfloat16 weights only on CPUs with AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT; on an AVX2-only CPU
    the packing raises, so bfloat16 keeps torch's own kernels there."""
    return available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def packing_refusal(name: str):
    """Why ``--weights name``, a format of oneDNN-packed weights, cannot run on (device, dtype); None where it can."""

    def refusal(device: torch.device, dtype: torch.dtype) -> str | None:
        if device.type != "cpu":
            return f"--weights {name} packs weights for oneDNN's CPU kernels; use it with --device cpu."
        if not available():
            return f"This torch build has no oneDNN, so --weights {name} cannot run here."
        if dtype == torch.bfloat16 and not packs_bfloat16():
            return (f"This CPU lacks the AVX-512 or AVX-NE-CONVERT instructions oneDNN packs bfloat16 weights with, "
                    f"so --weights {name} cannot run in bfloat16 here; use --dtype float32 or --weights float.")
        return None

    return refusal


ONEDNN = WeightFormat(name="onednn", help="the same float weights packed for oneDNN, as exact", same_numbers=True,
                      layer=OneDNNLinear, refusal=packing_refusal("onednn"))
