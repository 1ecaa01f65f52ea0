"""The machine's hooks on a decode run: the cost-curve watch and thread sharing. Callers that decode for a user
(the API, the bench, chat, viz) install ``machine_hooks()`` on their ``Decoder``; a bare engine run has none."""

from __future__ import annotations

from drafting.engine.hooks import DecodeHook, StepDone
from drafting.machine import thread_share
from drafting.machine.curve_watch import note_step, notice, settle


class CurveWatchHook(DecodeHook):
    """Keeps a cached cost curve true to this run (drafting.machine.curve_watch)."""

    def before_run(self, run) -> None:
        settle(run.lm.model)  # a cost curve found off by earlier steps is measured again here, before the clock starts

    def after_step(self, run, step: StepDone) -> None:
        note_step(run.lm.model, step.rows, step.prefix_len, step.verify_s)


class ThreadShareHook(DecodeHook):
    """Gives threads up while other processes hold the cores (drafting.machine.thread_share)."""

    def before_run(self, run) -> None:
        thread_share.run_starts(run.lm.device)

    def after_step(self, run, step: StepDone) -> None:
        # a network that runs its own threads (llama.cpp's) says so with set_threads
        shared = thread_share.tick(run.lm.device, getattr(run.lm.model, "set_threads", None))
        if shared:
            notice(shared)


def machine_hooks() -> list[DecodeHook]:
    return [CurveWatchHook(), ThreadShareHook()]
