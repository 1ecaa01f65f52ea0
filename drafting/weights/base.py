"""What goose's stand-ins for ``nn.Linear`` share (the oneDNN, MKL-packed and int8 weight formats): the layer's
sizes, its bias kept dense, and how it prints. Each format keeps its weight its own way and has its own forward."""

from __future__ import annotations

import torch


class LinearStandIn(torch.nn.Module):
    """Inference-only replacement for ``linear``: ``in_features``, ``out_features`` and ``bias`` as it had them."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        bias = linear.bias.detach() if linear.bias is not None else None
        self.register_buffer("bias", bias, persistent=False)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
