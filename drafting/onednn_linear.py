"""A Linear layer whose weight is pre-packed for oneDNN's CPU matmul (same float weights, faster kernel).

Measured on a 2-core AVX-512 CPU with SmolLM2-135M in float32 (256 tokens cached): torch's default Linear path
(MKL) takes 38 ms for a one-token step and 61 ms for two rows (small batches fall off MKL's matrix-vector path).
Here the weight is reordered once into oneDNN's matmul layout (``_reorder_linear_weight``) and multiplied with
``_linear_pointwise``, which takes and returns ordinary tensors: 27 ms for one row, 26 for two, 30 for eight, 35
for 16 and 77 for 64. The flatter the curve, the more a tree verification can hold. (A first version kept the
weight as an opaque oneDNN tensor from ``to_mkldnn`` and converted the activations to and from oneDNN's layout
around every call: 30/35/37/44/83 ms; the conversions alone were 12% of a forward.) Each row of a batch matches
the same row computed alone to float rounding (about 5e-5 in a layer's output), as with the default kernels.
In bfloat16 the same packing gave the very numbers of torch's own bf16 Linear, faster: a one-token step 16 ms
against 19.5, 16 rows 22.5 against 27.6 (torch's path re-packs the weight on every call).
"""

from __future__ import annotations

import torch


class OneDNNLinear(torch.nn.Module):
    """Drop-in for ``nn.Linear`` in inference: holds only the packed weight (and the bias, dense)."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        weight = linear.weight.detach()
        self.register_buffer("packed", torch.ops.mkldnn._reorder_linear_weight(weight), persistent=False)
        bias = linear.bias.detach() if linear.bias is not None else None
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, shape[-1]), self.packed, self.bias, "none", [], "")
        return y.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class RowDispatchLinear(OneDNNLinear):
    """Holds the plain weight beside the packed one: a one-row input (a plain decoding step) takes torch's own
    kernel, more rows (tree steps, prefill) take oneDNN's. On CPUs where oneDNN loses for one row but wins from a
    few rows up, both kinds of step get the faster kernel. Float32 only is offered as exact (see
    drafting.weights): both kernels compute each row to float rounding, so a tree row matches the same row of a
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
