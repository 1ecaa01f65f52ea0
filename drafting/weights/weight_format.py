"""What goose knows about one weight format (each is declared in its own file of drafting.weights and listed once
in drafting.weights.formats): the layer it puts in place of ``nn.Linear``, where it runs, whether it computes
the numbers of plain float weights (then ``--weights auto`` may choose it), how the probe times it, and what
caches of its timings tell it apart by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from drafting.errors import WeightsError


def runs_anywhere(device: torch.device, dtype: torch.dtype) -> str | None:
    return None


@dataclass(frozen=True)
class WeightFormat:
    name: str
    help: str  # what it is, in a few words (the --weights help lists them)
    same_numbers: bool  # float's weights and numbers up to float rounding, other kernels: auto chooses among these
    # the layer that replaces every nn.Linear (called with the linear); None: the linear layers stay
    layer: Callable[[torch.nn.Module], torch.nn.Module] | None = None
    # why it cannot run on (device, dtype), one sentence for the user; None where it can
    refusal: Callable[[torch.device, torch.dtype], str | None] = runs_anywhere
    # the format whose kernel its one-row steps (plain decoding) and its tree steps run: None, its own
    one_row_as: str | None = None
    trees_as: str | None = None
    auto_dtype: torch.dtype | None = None  # what --dtype auto gives it, where it computes in one dtype only
    # called on the model once its layers are in place (a split measured on this machine, say)
    prepare: Callable[[torch.nn.Module], object] | None = None
    # what caches of its timings add to its name to tell two nets of this format apart; None: nothing
    key_part: Callable[[torch.nn.Module], str | None] | None = None
    keeps_two_copies: bool = False  # holds a second copy of every linear weight beside the plain one

    @property
    def one_row_kernel(self) -> str:
        return self.one_row_as or self.name

    @property
    def tree_kernel(self) -> str:
        return self.trees_as or self.name

    @property
    def timed(self) -> bool:
        """The probe times it: it computes float's numbers and its tree steps run its own kernel (a format that
        only combines two others' kernels is judged from theirs)."""
        return self.same_numbers and self.trees_as is None

    @property
    def trees_only(self) -> bool:
        """Its one-row steps run another format's kernel, so only its tree figures say anything of its own."""
        return self.one_row_as is not None

    def check(self, device: torch.device, dtype: torch.dtype) -> None:
        """Raise ``WeightsError`` (one sentence) where it cannot run on ``device`` in ``dtype``."""
        why = self.refusal(device, dtype)
        if why is not None:
            raise WeightsError(why)

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        return self.refusal(device, dtype) is None

    def key(self, net: torch.nn.Module) -> str:
        """The format as caches of its timings tell it apart: its name, and what ``key_part`` adds for ``net``."""
        part = self.key_part(net) if self.key_part is not None else None
        return f"{self.name}|{part}" if part else self.name
