"""A Linear layer whose weight is pre-packed for oneDNN's CPU matmul (same float weights, faster kernel).

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


class RowDispatchLinear(OneDNNLinear):
    """Holds the plain weight beside the packed one: a one-row input (a plain decoding step) takes torch's own
    kernel, more rows (tree steps, prefill) take oneDNN's. On CPUs where oneDNN loses for one row but wins from a
    few rows up, both kinds of step get the faster kernel. Float32 only is offered as exact (see
    drafting.weights.formats): both kernels compute each row to float rounding, so a tree row matches the same row of a
    one-row step as closely as with either kernel alone. The price is a second copy of the weights in memory."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__(linear)
        self.register_buffer("weight", linear.weight.detach(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() == self.in_features:
            return torch.nn.functional.linear(x, self.weight, self.bias)
        return super().forward(x)


def available() -> bool:
    return torch.backends.mkldnn.is_available()
