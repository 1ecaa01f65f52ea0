"""Replay speculative proposers over the recorded greedy outputs of a vllm_bench run, stepping them the way
vLLM's step loop does, in seconds instead of an engine's minutes.

    .venv-vllm/bin/python -m scripts.vllm_replay RUN.json [--methods goose,goose:SETTINGS,suffix,ngram]
        [--concurrency 1,4,16] [--cost STEP_COST.json] [--json OUT]

Greedy verification of a draft needs only the output it must match, and every lossless method produces
``none``'s output, so a replay of ``none``'s recorded turns (prompt ids and output ids of every turn, in
RUN.json's rows) gives each proposer exactly the batches, accepted tokens and row moves that vLLM would give it:
the conversations of the prompt file run in a closed loop of ``concurrency`` clients, new requests take the
rows finished ones left, then the batch is condensed. The counts (drafting steps, draft tokens, accepted tokens)
are the engine's, to the token where the drafts do not depend on time (GooseProposer's step budget reads its
clock). What a replay cannot know is time: a decoding step's milliseconds are read off ``scripts.vllm_step_cost``
rows (``--cost``; without them every step costs the same, so the ratio counts steps), prefill is left out, and
the proposer's own time is measured. The modelled ratio is a rough ranking, not a benchmark: real runs differ
from it by more than the methods differ from each other (docs/vllm.md, "Replaying a run").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from drafting.bench.identity import first_divergence
from drafting.integrations.token_adjacency import TokenAdjacency
from drafting.integrations.vllm import GooseProposer
from scripts.vllm_bench import parse_concurrency
from scripts.vllm_runs import MethodError, method_config

NGRAM_DEFAULT = 5  # vLLM's prompt_lookup_min and _max when `ngram` sets neither


def accepted_length(draft: list[int], rest: list[int]) -> int:
    """How many of ``draft``'s tokens greedy verification accepts where the output goes on with ``rest``."""
    n = first_divergence(draft, rest[: len(draft)])
    return len(draft) if n is None else n


class ReplayError(ValueError):
    """Bad input for a replay; one sentence."""


def recorded_turns(run: dict) -> list[list[tuple[list[int], list[int]]]]:
    """Per prompt (in the run's order) its turns as (prompt ids, output ids), from ``none`` at the lowest
    concurrency run."""
    plain = [r for r in run.get("runs", []) if r.get("method") == "none"]
    if not plain:
        raise ReplayError("The run has no `none` rows to replay; run vllm_bench with --json first.")
    low = min(r.get("concurrency", 1) for r in plain)
    rows = [r for r in plain if r.get("concurrency", 1) == low]
    if any("turn_ids" not in r for r in rows):
        raise ReplayError("The run's rows have no turn_ids (recorded by vllm_bench since 2026-12-02); rerun it.")
    return [[(list(p), list(o)) for p, o in r["turn_ids"]] for r in rows]


class StepModel:
    """Milliseconds of one decoding step of B requests verifying T tokens, read off scripts.vllm_step_cost rows:
    the mean of the rows of that batch size and token count, linear between the token counts and batch sizes
    probed (engines with and without a speculative config apart); without rows every step costs 1 ms, so the
    modelled time counts steps."""

    def __init__(self, rows: list[dict] | None = None):
        self.tables: dict[bool, dict[int, dict[int, float]]] = {False: {}, True: {}}  # spec -> batch -> T -> ms
        groups: dict[tuple, list[float]] = {}
        for r in rows or []:
            groups.setdefault((bool(r["speculation"]), r["batch"], r["verified"]), []).append(r["median_ms"])
        for (spec, b, t), ms in groups.items():
            self.tables[spec].setdefault(b, {})[t] = float(np.mean(ms))

    @staticmethod
    def _interp(points: dict[int, float], x: float) -> float:
        xs = sorted(points)
        return float(np.interp(x, xs, [points[k] for k in xs]))

    def ms(self, speculative: bool, requests: int, verified: int) -> float:
        table = self.tables[speculative] or self.tables[False]
        if not table:
            return 1.0
        sizes = sorted(table)
        lo = max([b for b in sizes if b <= requests], default=sizes[0])
        hi = min([b for b in sizes if b >= requests], default=sizes[-1])
        # the same drafts per request at both probed sizes
        per_request = verified / requests
        at = {b: self._interp(table[b], per_request * b) for b in (lo, hi)}
        if lo == hi:
            return at[lo]
        return at[lo] + (at[hi] - at[lo]) * (requests - lo) / (hi - lo)

    def describe(self) -> str:
        return "; ".join(f"{'spec' if spec else 'plain'} B={b}: " + " ".join(f"T{t}={ms:.0f}" for t, ms in sorted(ts.items()))
                         for spec, tables in self.tables.items() for b, ts in sorted(tables.items()))


class _Request:
    def __init__(self, rid: str, conv: int, prompt: list[int], output: list[int]):
        self.id, self.conv, self.prompt, self.output = rid, conv, prompt, output
        self.n = 0  # tokens committed (num_tokens_no_spec)
        self.generated = 0
        self.draft: list[int] = []

    @property
    def finished(self) -> bool:
        return self.generated >= len(self.output)


class SuffixAdapter:
    """vLLM's SuffixDecodingProposer behind the custom-class signature (it reads request ids from the batch)."""

    def __init__(self, k: int, max_model_len: int):
        from vllm.v1.spec_decode.suffix_decoding import SuffixDecodingProposer

        spec = SimpleNamespace(num_speculative_tokens=k, suffix_decoding_max_tree_depth=24,
                               suffix_decoding_max_spec_factor=1.0, suffix_decoding_min_token_prob=0.1,
                               suffix_decoding_max_cached_requests=10000)
        self.k = k
        self.inner = SuffixDecodingProposer(SimpleNamespace(speculative_config=spec,
                                                            model_config=SimpleNamespace(max_model_len=max_model_len)))

    def propose(self, sampled, num_tokens_no_spec, token_ids_cpu, req_ids, prompt_lens):
        batch = SimpleNamespace(req_ids=req_ids, num_tokens_no_spec=num_tokens_no_spec, token_ids_cpu=token_ids_cpu,
                                req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                num_prompt_tokens=np.array(prompt_lens))
        return self.inner.propose(self.k, batch, sampled)


class NgramAdapter:
    """vLLM's NgramProposer (lookup ``lo``..``hi``) behind the custom-class signature."""

    def __init__(self, k: int, max_model_len: int, max_num_seqs: int, lo: int, hi: int):
        from vllm.v1.spec_decode.ngram_proposer import NgramProposer

        config = SimpleNamespace(
            speculative_config=SimpleNamespace(prompt_lookup_min=lo, prompt_lookup_max=hi, num_speculative_tokens=k),
            model_config=SimpleNamespace(max_model_len=max_model_len),
            scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs),
            parallel_config=SimpleNamespace(tensor_parallel_size=1))
        self.k = k
        self.inner = NgramProposer(config)

    def propose(self, sampled, num_tokens_no_spec, token_ids_cpu, req_ids, prompt_lens):
        return self.inner.propose(self.k, sampled, num_tokens_no_spec, token_ids_cpu)


class GooseAdapter:
    """GooseProposer with a table of its own (not the process-wide one) and the replay's clock."""

    def __init__(self, settings: str, k: int, max_model_len: int, clock):
        self.inner = GooseProposer(num_speculative_tokens=k, max_model_len=max_model_len, table=TokenAdjacency(),
                                   settings=settings, clock=clock)

    def propose(self, sampled, num_tokens_no_spec, token_ids_cpu, req_ids, prompt_lens):
        return self.inner.propose(sampled, num_tokens_no_spec, token_ids_cpu)


class NoDrafts:
    """``none``: the engine without speculation."""

    def propose(self, sampled, *_args):
        return [[] for _ in sampled]


class BestOf:
    """Several proposers fed the same stream; the replay drafts, per row, the candidate accepted furthest."""

    def __init__(self, inner):
        self.inner = inner

    def propose(self, *args):
        return [list(ds) for ds in zip(*(p.propose(*args) for p in self.inner))]


def make_proposer(method: str, k: int, max_model_len: int, max_num_seqs: int, clock):
    """The proposer a bench method name stands for (names and their checks are vllm_bench's)."""
    if method.startswith("best:"):
        return BestOf([make_proposer(m, k, max_model_len, max_num_seqs, clock) for m in method[5:].split("|")])
    if method.startswith("oracle:"):
        return make_proposer(method.split(":", 1)[1], k, max_model_len, max_num_seqs, clock)
    try:
        config = method_config(method, k)
    except MethodError as exc:
        raise ReplayError(str(exc)) from None
    if config is None:
        return NoDrafts()
    if config["method"] == "custom_class":
        return GooseAdapter(method.partition(":")[2], k, max_model_len, clock)
    try:
        if config["method"] == "suffix":
            return SuffixAdapter(k, max_model_len)
        return NgramAdapter(k, max_model_len, max_num_seqs, config.get("prompt_lookup_min", NGRAM_DEFAULT),
                            config.get("prompt_lookup_max", NGRAM_DEFAULT))
    except ImportError as exc:
        raise ReplayError(f"{method} replays vLLM's own proposer, which is not importable here ({exc}); use "
                          ".venv-vllm/bin/python.") from None


def replay(method: str, conversations, concurrency: int, k: int, model: StepModel, max_model_len: int = 4096) -> dict:
    """Step ``method``'s proposer over the conversations with ``concurrency`` in flight; its counts and times."""
    clock = [0.0]
    oracle = method.startswith("oracle:")
    best = method.startswith("best:")
    proposer = make_proposer(method, k, max_model_len, concurrency, lambda: clock[0])
    longest = max(len(p) + len(o) for conv in conversations for p, o in conv) + k + 2
    tokens = np.zeros((concurrency, max(longest, 16)), dtype=np.int32)
    num = np.zeros(concurrency, dtype=np.int32)
    rows: list[_Request | None] = []
    waiting = list(range(len(conversations)))[::-1]
    next_turn = [0] * len(conversations)
    counts = {"steps": 0, "drafting_steps": 0, "drafts": 0, "draft_tokens": 0, "accepted": 0, "new_tokens": 0}
    decode_ms = propose_s = 0.0
    lengths: dict[int, int] = {}  # draft tokens -> drafts of that length

    def start(conv: int) -> _Request | None:
        turn = next_turn[conv]
        if turn >= len(conversations[conv]):
            return None
        next_turn[conv] += 1
        prompt, output = conversations[conv][turn]
        return _Request(f"{conv}#{turn}", conv, prompt, output)

    while True:
        # schedule: finished requests leave, their next turn or a waiting prompt takes the freed row first
        holes = sorted(i for i, r in enumerate(rows) if r is not None and r.finished)
        arrivals = []
        for i in holes:
            nxt = start(rows[i].conv)
            if nxt is not None:
                arrivals.append(nxt)
            rows[i] = None
        while waiting and sum(r is not None for r in rows) + len(arrivals) < concurrency:
            nxt = start(waiting.pop())
            if nxt is not None:
                arrivals.append(nxt)
        for req in arrivals:
            free = [i for i, r in enumerate(rows) if r is None]
            if free:
                rows[free[0]] = req
            else:
                rows.append(req)
        while None in rows:  # condense as vLLM does: the last request moves into the lowest hole
            last = max(i for i, r in enumerate(rows) if r is not None) if any(rows) else -1
            hole = rows.index(None)
            if hole > last:
                del rows[hole:]
                break
            rows[hole], rows[last] = rows[last], None
            tokens[hole, : rows[hole].n] = tokens[last, : rows[hole].n]
        if not rows:
            break
        # run the step: prefill new rows, verify the drafts of the others greedily
        sampled, verified, decoding, drafted = [], 0, 0, False
        for i, req in enumerate(rows):
            if req.n == 0:
                tokens[i, : len(req.prompt)] = req.prompt
                req.n = len(req.prompt)
                new = req.output[:1]
            else:
                decoding += 1
                verified += 1 + len(req.draft)
                drafted = drafted or bool(req.draft)
                rest = req.output[req.generated:]
                got = accepted_length(req.draft, rest)
                if req.draft:
                    lengths[len(req.draft)] = lengths.get(len(req.draft), 0) + 1
                    counts["drafts"] += 1
                    counts["draft_tokens"] += len(req.draft)
                    counts["accepted"] += got
                new = rest[: got + 1]
            tokens[i, req.n : req.n + len(new)] = new
            req.n += len(new)
            req.generated += len(new)
            counts["new_tokens"] += len(new)
            num[i] = req.n
            sampled.append(list(new))
        counts["steps"] += 1
        counts["drafting_steps"] += drafted
        if decoding:
            step_ms = model.ms(method != "none", decoding, verified)
            decode_ms += step_ms
            clock[0] += step_ms / 1e3
        start_s = time.perf_counter()
        drafts = proposer.propose(sampled, num[: len(rows)], tokens[: len(rows)], [r.id for r in rows],
                                  [len(r.prompt) for r in rows])
        propose_s += time.perf_counter() - start_s
        for req, d in zip(rows, drafts):
            rest = req.output[req.generated:]
            if best:  # the candidate accepted furthest
                d = max(d, key=lambda c: accepted_length(c, rest))
            req.draft = [int(t) for t in d][: max(0, max_model_len - req.n - 1)]
            if oracle or best:  # keep only what will be accepted: the most any gating of this source could get
                req.draft = req.draft[: accepted_length(req.draft, rest)]
    return {"method": method, "concurrency": concurrency, **counts, "decode_s": decode_ms / 1e3,
            "propose_s": propose_s,
            "draft_lengths": dict(sorted(lengths.items()))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.vllm_replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a vllm_bench --json file with none's rows (turn_ids)")
    ap.add_argument("--methods", default="goose,suffix,ngram",
                    help="comma-separated vllm_bench methods (none, ngram, ngram:MAX, ngram:MIN-MAX, suffix, goose, "
                         "goose:SETTINGS); oracle:METHOD keeps only the draft tokens that will be accepted (the most any gating of METHOD could reach), "
                         "best:A|B the furthest accepted of several (the most a choice between them could reach)")
    ap.add_argument("--concurrency", default="1", help="comma-separated conversations in flight")
    ap.add_argument("--cost", help="scripts.vllm_step_cost --json rows: the step cost model")
    ap.add_argument("--json", dest="json_out", help="write the replays to this JSON file")
    args = ap.parse_args(argv)
    try:
        run = json.loads(Path(args.run).read_text())
        conversations = recorded_turns(run)
        model = StepModel(json.loads(Path(args.cost).read_text()) if args.cost else None)
        k = int(run.get("num_speculative_tokens", 8))
        results = []
        print(model.describe())
        for c in parse_concurrency(args.concurrency):
            plain = replay("none", conversations, c, k, model)["decode_s"]
            for m in [x.strip() for x in args.methods.split(",") if x.strip()]:
                r = replay(m, conversations, c, k, model)
                results.append(r)
                speed = plain / r["decode_s"] if r["decode_s"] else float("nan")
                print(f"c={c:<3} {m:<40} steps {r['steps']:5d} drafting {r['drafting_steps']:5d} "
                      f"drafted {r['draft_tokens']:5d} accepted {r['accepted']:5d} "
                      f"modelled x{speed:.3f} vs none, proposer {1e3 * r['propose_s'] / r['steps']:.2f} ms/step",
                      flush=True)
                print("      draft lengths:", r["draft_lengths"])
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
