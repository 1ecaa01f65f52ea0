"""``float``: the weights as loaded, in ``nn.Linear`` layers and torch's own kernels: plain decoding's numbers,
which every other format that computes the same numbers matches up to float rounding."""

from __future__ import annotations

from drafting.weights.weight_format import WeightFormat

FLOAT = WeightFormat(name="float", help="as loaded, torch's default kernels", same_numbers=True)
