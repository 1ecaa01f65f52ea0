"""What a caller can install on a ``Decoder`` to watch its steps without the loop knowing what it does.

The decode loop only proposes, forwards, accepts and observes. Everything else that rides along on a run — the
machine's cost-curve watch and thread sharing (drafting.machine.step_hooks), the margins behind each output
token (``RecordMargins``) — is a hook: called before a run's clock starts and after each of its steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from drafting.engine.fast_topk import row_topk


@dataclass
class StepDone:
    """One finished step, as a hook sees it."""

    rows: int  # rows of the forward (tree nodes + draft rows)
    prefix_len: int  # cached tokens before the step
    verify_s: float  # the forward and the acceptance
    logits: torch.Tensor  # (rows, V)
    path: list[int]  # accepted tree nodes, root first
    emitted: list[int]  # tokens appended to the output this step


class DecodeHook:
    """Base of the hooks: both calls do nothing unless overridden. ``run`` is the ``DecodeRun`` (its ``lm`` and
    its ``result``, filled as the run goes). ``timed = False``: a hook whose work is the caller's, not decoding's
    (what a benchmark records about the run): its time is left out of the run's ``wall_s``."""

    timed = True

    def before_run(self, run) -> None:
        """Before the run's clock starts: work done here is not counted as the run's."""

    def after_step(self, run, step: StepDone) -> None:
        """After each step, its record already in ``run.result``."""


class RecordMargins(DecodeHook):
    """Keeps the top-2 logit gap behind each output token in ``result.margins``: how close each emitted token
    was to a tie, which tells a low-precision divergence at a near-tie from a real one. Untimed: plain decoding
    does not pay for it (a top-2 over the vocabulary each step, 1% of a step on the embedded model on llama.cpp)."""

    timed = False

    def before_run(self, run) -> None:
        run.result.margins = []

    def after_step(self, run, step: StepDone) -> None:
        top2 = row_topk(step.logits[step.path].float(), 2)[0]  # emitted[j] is the argmax at path[j]
        run.result.margins.extend((top2[:, 0] - top2[:, 1]).tolist()[: len(step.emitted)])
