"""The bench loop: warm up once, then every prompt with every contender in turn (speculators interleave per
prompt), skipping what a resumed results file already holds and prompts that do not fit the context window."""

from __future__ import annotations

from typing import Iterator

from drafting.engine.decode import Decoder
from drafting.engine.loaded_model import LoadedModel
from drafting.machine.step_hooks import machine_hooks
from drafting.bench.prompt_file import Prompt
from drafting.models.chat_template import encode
from drafting.speculators import create
from drafting.bench.contenders import REFERENCE, Contender
from drafting.bench.one_prompt import run_one
from drafting.bench.results import ResultsFile, Skip
from drafting.bench.settings import BenchSettings
from drafting.bench.timing import ForwardTimer
from drafting.bench.traces import trace_stems

WARMUP_TOKENS = 8


def prompt_fits(lm: LoadedModel, prompt: Prompt, raw: bool) -> str | None:
    """None if the first turn fits the context window, else the reason (one sentence)."""
    ids = encode(lm.tokenizer, [{"role": "user", "content": prompt.text}], raw=raw)
    if len(ids) + 1 > lm.max_context:
        return f"its {len(ids)} tokens do not fit the context window of {lm.max_context}"
    return None


def warm_up(lm: LoadedModel, contenders: list[Contender], prompt: Prompt, raw: bool) -> None:
    """One short generation per engine kind, so first-call costs do not land on the first measured run."""
    ids = encode(lm.tokenizer, [{"role": "user", "content": prompt.text}], raw=raw)
    if len(ids) + WARMUP_TOKENS + 1 > lm.max_context:
        ids = ids[-(lm.max_context // 2):]
    Decoder(lm, create(REFERENCE), hooks=machine_hooks()).generate(ids, WARMUP_TOKENS)
    for c in contenders:
        if c.baseline:
            c.baseline.generate(ids, WARMUP_TOKENS)


def run_bench(lm: LoadedModel, contenders: list[Contender], prompts: list[Prompt], settings: BenchSettings,
              results: ResultsFile, warmup: bool = True) -> Iterator[dict | Skip]:
    """Yield each finished run (already saved in ``results``) or Skip; speculators interleave per prompt."""
    done = results.done()
    stems = trace_stems(p.id for p in prompts)  # over every prompt, so a resumed run names its traces the same
    timer = ForwardTimer(lm.model, lm.device)
    for c in contenders:
        if c.baseline is not None and c.baseline.model is not None:
            timer.also(c.baseline.model)
    try:
        todo = [p for p in prompts if any((p.id, c.spec) not in done for c in contenders)]
        if warmup and todo:
            warm_up(lm, contenders, todo[0], settings.raw)
        for prompt in todo:
            reason = prompt_fits(lm, prompt, settings.raw)
            if reason:
                skip = Skip(prompt.id, prompt.task, f"prompt {prompt.id!r} skipped: {reason}.")
                results.skip(skip)
                yield skip
                continue
            for c in contenders:
                if (prompt.id, c.spec) in done:
                    continue
                run = run_one(lm, c, prompt, settings, timer, results.reference(prompt.id),
                              results.reference_margins(prompt.id), stems[prompt.id])
                results.add(run)
                yield run
    finally:
        timer.close()
        for c in contenders:  # a baseline that started a server of its own stops it
            close = getattr(c.baseline, "close", None)
            if close is not None:
                close()
