"""``int8``: weight-only int8 Linear layers: int8 weights with one scale per output channel, bfloat16 activations.

Decoding a small model on a CPU is bound by reading the weights: a one-token step reads every weight once.
Stored as int8 they are half the bytes of bfloat16, and torch's CPU kernel for this layout
(``aten._weight_int8pack_mm``) multiplies without unpacking them, so one-token steps get faster; its cost
grows quickly with the rows, so it pays for few rows, not for wide trees. Only the weights are rounded;
activations stay bfloat16 and are never quantised, so a tree pass differs from a one-row pass only as in
bfloat16 ("identical up to ties"). With float32 activations the same kernel is slower than plain float32, so
the format requires bfloat16.

Prefill is the other way round: for many rows, unpacking the weights to bfloat16 and one dense product beats
the kernel, and at ``DENSE_ROWS`` rows the two are even. Forwards of more than ``DENSE_ROWS`` rows (prompts;
never a tree step, whose cost curve stops at 128) take the dense path. Figures: docs/measurements.md. Both compute the same weights
(the unpacked ones rounded once more to bfloat16), and every speculator and ``ar`` share the same prefill.
"""

from __future__ import annotations

import torch

from drafting.weights.base import LinearStandIn
from drafting.weights.weight_format import WeightFormat

DENSE_ROWS = 128


class Int8WeightLinear(LinearStandIn):
    """Drop-in for ``nn.Linear`` in inference: symmetric per-output-channel int8 weights."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__(linear)
        weight = linear.weight.detach().float()
        scales = weight.abs().amax(dim=1).clamp(min=1e-12) / 127.0
        qweight = torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
        self.register_buffer("qweight", qweight, persistent=False)
        self.register_buffer("scales", scales.to(linear.weight.dtype), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        if flat.shape[0] > DENSE_ROWS:
            y = torch.nn.functional.linear(flat, self.qweight.to(x.dtype) * self.scales[:, None])
        else:
            y = torch.ops.aten._weight_int8pack_mm(flat, self.qweight, self.scales)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features)


def available() -> bool:
    """Whether this torch build has the CPU kernel (it runs a 1x1 product to find out)."""
    try:
        one = torch.ones(1, 1, dtype=torch.bfloat16)
        torch.ops.aten._weight_int8pack_mm(one, torch.ones(1, 1, dtype=torch.int8), one[0])
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
    return True


def refusal(device: torch.device, dtype: torch.dtype) -> str | None:
    if device.type != "cpu":
        return "--weights int8 uses torch's CPU int8 kernels; use it with --device cpu."
    if dtype != torch.bfloat16:
        return "--weights int8 computes in bfloat16 between its int8 weights; use it with --dtype bfloat16 (or auto)."
    if not available():
        return "This torch build has no weight-only int8 CPU kernel, so --weights int8 cannot run here."
    return None


# different weights (rounded to int8), so never chosen by --weights auto; bfloat16 between its layers
INT8 = WeightFormat(name="int8", help="weight-only int8 linear layers, CPU, bfloat16, which --dtype auto then picks; "
                    "identical to ar up to near-ties; never chosen by auto", same_numbers=False,
                    layer=Int8WeightLinear, refusal=refusal, auto_dtype=torch.bfloat16)
