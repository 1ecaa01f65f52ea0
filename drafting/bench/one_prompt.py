"""How one prompt is run with one contender: every turn in order, each fed the contender's own earlier answers,
and the run dict that records it (timings, steps, identity to `ar`, per-source acceptance, info, stats)."""

from __future__ import annotations

from drafting.machine.curve_watch import settle
from drafting.errors import ContextError
from drafting.engine.decode import GenerationResult
from drafting.baselines.llama_cpp import LlamaCppError
from drafting.engine.loaded_model import LoadedModel
from drafting.bench.prompt_file import Prompt
from drafting.models.chat_template import decode, encode
from drafting.engine.trace import StepRecord, source_counts
from drafting.bench.contenders import REFERENCE, Contender
from drafting.bench.identity import first_divergence, tie_check
from drafting.bench.settings import BenchSettings
from drafting.bench.summary import aggregate_info
from drafting.bench.timing import ForwardTimer
from drafting.bench.traces import write_trace


def run_one(lm: LoadedModel, contender: Contender, prompt: Prompt, settings: BenchSettings, timer: ForwardTimer,
            reference: list[int] | None, reference_margins: list[float] | None = None,
            trace_stem: str | None = None) -> dict:
    """Run every turn of ``prompt`` with ``contender``, feeding back its own answers; return the run dict.
    ``trace_stem``: the prompt's trace file-name part among the run's prompts (``traces.trace_stems``)."""
    messages: list[dict] = []
    output: list[int] = []
    margins: list[float] = []
    records: list[StepRecord] = []
    wall = prefill = draft = verify = 0.0
    steps = 0
    forwards: list[float] = []
    stops: list[str] = []
    notes: list[str] = []
    prompt_tokens = 0
    stats_before = contender.stats()
    turn_results: list[tuple[str, list[int], GenerationResult]] = []
    timer.take()
    for k, turn in enumerate(prompt.turns):
        messages.append({"role": "user", "content": turn})
        ids = encode(lm.tokenizer, messages, raw=settings.raw)
        try:
            settle(lm.model)  # a cost curve found off is measured again now, so its forwards are not this turn's
            timer.take()
            result = contender.generate(ids, settings.max_new_tokens)
        except (ContextError, LlamaCppError) as exc:
            notes.append(f"turn {k + 1} skipped: {exc}")
            break
        calls = timer.take()
        forwards += calls
        turn_results.append((turn, ids, result))
        prompt_tokens += len(ids)
        output += result.output_ids
        margins += result.margins or []
        messages.append({"role": "assistant", "content": decode(lm.tokenizer, result.output_ids, lm.eos_ids)})
        wall += result.wall_s
        stops.append(result.stop_reason)
        if contender.decoder:
            prefill += result.prefill_s
            draft += result.draft_s
            verify += result.verify_s
            steps += result.steps
            records += result.records
        elif contender.external:  # no torch forwards to time: its own first-token time is the prefill
            prefill += result.prefill_s
        else:  # hf-ar / hf-pld: the first forward is the prefill, and it already yields a token
            prefill += calls[0] if calls else 0.0
            steps += len(calls)
            verify += sum(calls[1:])
            draft += max(0.0, result.wall_s - sum(calls))
    forward_s, passes = sum(forwards), len(forwards)
    if contender.decoder and not forwards:  # an engine with no torch module to hook: its passes are the prefill and steps
        forward_s, passes = prefill + verify, steps + len(turn_results)
    stats_after = contender.stats()
    if contender.external:
        steps = int(stats_after.get("decode_calls", 0) - stats_before.get("decode_calls", 0)) - len(turn_results)
        forward_s = wall  # everything it does is its own engine
    run = {
        "prompt_id": prompt.id,
        "task": prompt.task,
        "speculator": contender.spec,
        "device": contender.device or lm.device.type,  # where this row ran
        "new_tokens": len(output),
        "wall_s": wall,
        "steps": steps,
        "mean_accepted": len(output) / steps if steps else 0.0,
        "draft_s": draft,
        "verify_s": verify,
        "identical_to_ar": None,
        "first_divergence": None,
        "prefill_s": prefill,
        "forward_passes": passes,
        "forward_s": forward_s,
        "overhead_s": max(0.0, wall - forward_s),
        "prompt_tokens": prompt_tokens,
        "turns": len(turn_results),
        "stop_reason": stops[-1] if stops else "skipped",
        "output_ids": output,
        "sources": source_counts(records),
        "info": aggregate_info(records),
        "stats": {k: v - stats_before.get(k, 0) for k, v in stats_after.items()},
    }
    if notes:
        run["notes"] = notes
    if margins:
        run["margins"] = [round(m, 4) for m in margins]  # ar's top-2 logit gap at every emitted token
    if contender.external:
        run["external"] = True
    elif not contender.decoder and not contender.baseline.same_network:
        run["other_network"] = True  # transformers' model has float weights where ours are int8: not comparable
        notes.append("not compared with ar: transformers runs the float weights, this run int8 ones")
        run["notes"] = notes
    elif settings.params.greedy and contender.spec == REFERENCE:
        run["identical_to_ar"] = True
        run["exact_up_to_ties"] = True
    elif settings.params.greedy and reference is not None:
        div = first_divergence(reference, output)
        run["identical_to_ar"] = div is None
        run["first_divergence"] = div
        run.update(tie_check(div, reference_margins, settings.tie_margin))
    if settings.trace_dir is not None and contender.decoder and turn_results:
        write_trace(lm, settings, prompt, contender.spec, turn_results, trace_stem)
    return run
