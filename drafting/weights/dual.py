"""``dual``: oneDNN-packed weights for tree steps and prefill, torch's own kernel for one-row steps.

On CPUs where oneDNN loses a one-row step but wins from a few rows up, both kinds of step get the faster kernel.
``--weights auto`` never times it: its one-row steps are ``float``'s and its tree steps ``onednn``'s, so the
probe's figures for those two decide it (drafting.weights.probe).
"""

from __future__ import annotations

import torch

from drafting.weights.float import FLOAT
from drafting.weights.onednn import ONEDNN, OneDNNLinear, packing_refusal
from drafting.weights.weight_format import WeightFormat


class RowDispatchLinear(OneDNNLinear):
    """Holds the plain weight beside the packed one: a one-row input (a plain decoding step) takes torch's own
    kernel, more rows (tree steps, prefill) take oneDNN's. Float32 only is offered as exact: both kernels compute
    each row to float rounding, so a tree row matches the same row of a one-row step as closely as with either
    kernel alone. The price is a second copy of the weights in memory."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__(linear)
        self.register_buffer("weight", linear.weight.detach(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() == self.in_features:
            return torch.nn.functional.linear(x, self.weight, self.bias)
        return super().forward(x)


DUAL = WeightFormat(name="dual", help="torch's kernel for one-row steps, oneDNN's for trees and prefill, as exact",
                    same_numbers=True, layer=RowDispatchLinear, refusal=packing_refusal("dual"),
                    one_row_as=FLOAT.name, trees_as=ONEDNN.name, keeps_two_copies=True)
