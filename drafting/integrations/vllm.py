"""GOOSE as a vLLM speculative proposer (``method: custom_class``).

    LLM(model, speculative_config={"method": "custom_class",
                                   "model": "drafting.integrations.vllm.GooseProposer",
                                   "num_speculative_tokens": 8})

vLLM builds ``GooseProposer(vllm_config)`` in each worker and, after every step, calls
``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)`` once for the whole batch: row i of
``token_ids_cpu`` holds request i's prompt and output, its first ``num_tokens_no_spec[i]`` entries committed
(this step's ``sampled_token_ids[i]`` included: the accepted drafts plus the engine's own token; empty while
the request is still in a partial prefill). It returns one chain per row, possibly empty; vLLM verifies
chains losslessly, so a wrong draft costs time, never output.

The custom-class hook is not told request ids, and vLLM moves rows when requests finish, so a request is
recognised by its stream (length, first and last tokens) and its state follows it to its new row. State a
call does not see is dropped, as vLLM's SuffixDecodingProposer stops requests that left the batch. Each call
then keeps only the draft tokens that pay for their verification in a batch of that size (batch_budget.py). This module
does not import vLLM: the class is exercised without it, and only reads the two config fields it needs.
Its own settings (SETTINGS below) come from the environment variable GOOSE_VLLM_SETTINGS, e.g.
``spine=full,min_path=0.2``, which vLLM's engine and worker processes inherit.
"""

from __future__ import annotations

import logging
import os
import time

from drafting.integrations.batch_budget import (KNEE_PRIOR, ChainAcceptance, DepthAcceptance, StepCost, keep_paying,
                                                threshold, token_chances)
from drafting.integrations.goose_chain import SOURCES, RequestChain
from drafting.integrations.token_adjacency import TokenAdjacency
from drafting.integrations.vllm_trace import ProposerTrace, tokenizer_of
from drafting.sources.output_memory import OutputMemory
from drafting.sources import suffix_trees

CLASS_PATH = "drafting.integrations.vllm.GooseProposer"
SETTINGS_ENV = "GOOSE_VLLM_SETTINGS"  # vLLM's config has no field for a custom proposer's own settings
SETTINGS = {  # name: (default, type, help)
    "spine": ("goose", str, "goose = GOOSE's spine share of k from EMA and confidence; full = the whole chain up to k"),
    "min_path": (0.3, float, "an adjacency chain stops when the product of its successors' shares falls below this"),
    "ngram_min": (1, int, "shortest context n-gram matched (5 down to this; GOOSE in goose itself stops at 3)"),
    "own": (1, int, "1 = the request's own text is also read as a memory (the continuation most earlier occurrences "
                    "of its longest suffix agree on); 0 = off"),
    "aligned": (1, int, "1 = the text the request copies (an edited file in the prompt, its own earlier text) is read "
                        "at a pointer kept through every edit, one more candidate chain; 0 = off"),
    "chain": (20, int, "context chain length before extension"),
    "chain_max": (100, int, "longest extended context chain"),
    "budget": ("cost", str, "cost = each step keeps the draft tokens whose acceptance chance pays for their "
                            "verification (batch_budget.py); off = every request drafts what GOOSE proposes"),
    "knee": ("auto", str, "tokens a step verifies for the price of its fixed part: auto = measured from the "
                          "step times, or a number"),
    "knee_prior": (KNEE_PRIOR, float, "the knee assumed until the step times can tell it (knee=auto)"),
    "chance": ("kind", str, "kind = a draft token's chance is the acceptance at its depth of drafts of its kind over "
                            "every request (lowered for a request whose drafts do worse); request = each request's own "
                            "per-token acceptance, the same at every depth"),
    "jump": ("auto", str, "auto = steps that verify drafts get a fixed part of their own, measured, and a step "
                          "drafts only where its drafts pay for it; off = one line through all steps"),
    "suffix": ("auto", str, "auto = arctic-inference's suffix trees (vLLM's suffix decoding's source) are one more "
                            "candidate source where that package is installed; on = required; off = not used"),
    "memory": (1 << 19, int, "tokens of earlier outputs remembered as a draft source (the oldest forgotten first); "
                             "0 = no memory"),
    "trace": ("", str, "a folder: each request's steps (the chains offered, the one sent, what the engine accepted) "
                       "are written there as a goose trace that `goose viz FILE` replays; empty = off"),
}


class SettingsError(ValueError):
    """A GooseProposer setting that cannot be used; one sentence."""


def parse_settings(text: str | None) -> dict:
    """``spine=full,min_path=0.2`` (or ``+`` between items) -> settings over the defaults."""
    out = {name: default for name, (default, _, _) in SETTINGS.items()}
    for item in filter(None, (x.strip() for x in (text or "").replace("+", ",").split(","))):
        name, _, value = item.partition("=")
        if name not in SETTINGS or not value:
            raise SettingsError(f"GooseProposer setting {item!r} is not NAME=VALUE with NAME one of {', '.join(SETTINGS)}.")
        try:
            out[name] = SETTINGS[name][1](value)
        except ValueError:
            raise SettingsError(f"GooseProposer setting {name} needs a {SETTINGS[name][1].__name__}, not {value!r}.") from None
    if not 1 <= out["ngram_min"] <= 5:
        raise SettingsError(f"GooseProposer setting ngram_min must be 1 to 5, not {out['ngram_min']}.")
    if out["spine"] not in ("goose", "full"):
        raise SettingsError(f"GooseProposer setting spine must be goose or full, not {out['spine']!r}.")
    if out["budget"] not in ("cost", "off"):
        raise SettingsError(f"GooseProposer setting budget must be cost or off, not {out['budget']!r}.")
    if out["knee"] != "auto":
        try:
            knee = float(out["knee"])
        except ValueError:
            knee = 0.0
        if not knee > 0:
            raise SettingsError(f"GooseProposer setting knee must be auto or a number above 0, not {out['knee']!r}.")
        out["knee"] = knee
    if out["chance"] not in ("kind", "request"):
        raise SettingsError(f"GooseProposer setting chance must be kind or request, not {out['chance']!r}.")
    if out["jump"] not in ("auto", "off"):
        raise SettingsError(f"GooseProposer setting jump must be auto or off, not {out['jump']!r}.")
    for name in ("own", "aligned"):
        if out[name] not in (0, 1):
            raise SettingsError(f"GooseProposer setting {name} must be 0 or 1, not {out[name]}.")
    if out["suffix"] not in ("auto", "on", "off"):
        raise SettingsError(f"GooseProposer setting suffix must be auto, on or off, not {out['suffix']!r}.")
    if out["memory"] < 0:
        raise SettingsError(f"GooseProposer setting memory must be 0 or more tokens, not {out['memory']}.")
    if not out["knee_prior"] > 0:
        raise SettingsError(f"GooseProposer setting knee_prior must be above 0, not {out['knee_prior']}.")
    return out


# a child of vLLM's logger, so the line appears in vLLM's own log format
LOG = logging.getLogger("vllm.goose")
LOG_EVERY = 2000  # steps between two lines on what the step budget reads

SOURCE_DECAY = 0.99  # the process-wide acceptance of a source fades by this per verified draft of it

_SHARED_TABLES: dict[int | None, TokenAdjacency] = {}
# Tables kept per process, one per vocabulary size; one more drops the one made first (a process serves one
# model, so this only bounds memory where several are built in turn). Each table has its own bound
# (token_adjacency.TokenAdjacency.max_entries).
MAX_SHARED_TABLES = 4


def shared_table(vocab_size: int | None = None) -> TokenAdjacency:
    """The process-wide adjacency table of a vocabulary size: every request of a model learns into it and drafts
    from it (hot start). Keyed by vocabulary, so ids learned from one model are never proposed to a model that
    does not have them."""
    table = _SHARED_TABLES.get(vocab_size)
    if table is None:
        while len(_SHARED_TABLES) >= MAX_SHARED_TABLES:
            del _SHARED_TABLES[next(iter(_SHARED_TABLES))]
        table = _SHARED_TABLES[vocab_size] = TokenAdjacency()
    return table


def _vocab_size(model_config) -> int | None:
    """The number of token ids the model scores (vLLM's ModelConfig.get_vocab_size), None when not told."""
    get = getattr(model_config, "get_vocab_size", None)
    try:
        size = int(get()) if callable(get) else None
    except (TypeError, ValueError, AttributeError):
        size = None
    return size if size and size > 0 else None


def speculative_config(num_speculative_tokens: int = 8) -> dict:
    """The ``speculative_config`` that makes vLLM draft with GooseProposer."""
    return {"method": "custom_class", "model": CLASS_PATH, "num_speculative_tokens": int(num_speculative_tokens)}


class GooseProposer:
    """Batched GOOSE chain proposer for vLLM's ``custom_class`` speculative method."""

    def __init__(self, vllm_config=None, *, num_speculative_tokens: int | None = None,
                 max_model_len: int | None = None, table: TokenAdjacency | None = None, settings: str | None = None,
                 vocab_size: int | None = None, clock=time.perf_counter):
        spec = getattr(vllm_config, "speculative_config", None)
        model = getattr(vllm_config, "model_config", None)
        k = num_speculative_tokens if num_speculative_tokens is not None else getattr(spec, "num_speculative_tokens", None)
        length = max_model_len if max_model_len is not None else getattr(model, "max_model_len", None)
        if not k or int(k) < 1:
            raise ValueError("GooseProposer needs num_speculative_tokens >= 1 in the speculative config.")
        if not length or int(length) < 2:
            raise ValueError("GooseProposer needs the model's max_model_len to be at least 2.")
        self.k = int(k)
        self.max_model_len = int(length)
        self.vocab_size = vocab_size if vocab_size is not None else _vocab_size(model)
        self.table = table if table is not None else shared_table(self.vocab_size)
        s = parse_settings(settings if settings is not None else os.environ.get(SETTINGS_ENV))
        self.settings = s
        self._chain_args = {"chain": s["chain"], "chain_max": s["chain_max"], "min_path": s["min_path"],
                            "full_spine": s["spine"] == "full",
                            "ngram_sizes": tuple(range(5, s["ngram_min"] - 1, -1)), "vocab_size": self.vocab_size,
                            "own": bool(s["own"]), "aligned": bool(s["aligned"])}
        # this proposer's own memory of the answers it has seen written: never shared with another proposer
        self.memory = OutputMemory(max_tokens=s["memory"]) if s["memory"] else None
        use_trees = s["suffix"] == "on" or (s["suffix"] == "auto" and suffix_trees.available())
        self.suffix_trees = suffix_trees.SuffixTrees() if use_trees else None  # this proposer's own, too
        self._rows: dict[int, RequestChain] = {}  # batch row of the previous call -> its request's state
        self.budget = s["budget"] == "cost"
        self.cost = StepCost(prior=s["knee_prior"], fixed=None if s["knee"] == "auto" else s["knee"],
                             jump=s["jump"] == "auto")
        # per-token acceptance of each source over every request of this proposer: a new request's prior
        self.source_acceptance = {s: ChainAcceptance(decay=SOURCE_DECAY) for s in SOURCES}
        self.kind_acceptance = DepthAcceptance()
        self._clock = clock
        self._last_call: float | None = None
        self._last_verified = 0  # tokens the step after the previous call verifies: one per request + its drafts
        self._last_drafted = False  # whether any of them were drafts
        self._calls = 0
        self.trace = None
        if s["trace"]:
            header = {"speculator": "goose", "engine": "vllm", "command": "vllm", "k": self.k,
                      "model": str(getattr(model, "model", "") or ""), "mode": "vLLM, GooseProposer chains"}
            try:
                self.trace = ProposerTrace(s["trace"], header, tokenizer_of(model))
            except OSError as exc:
                raise SettingsError(f"GooseProposer setting trace: cannot write traces in {s['trace']!r} "
                                    f"({exc.strerror or exc}).") from None

    # vLLM's runner calls this after loading the target model; a token-id proposer has nothing to load
    def load_model(self, *args, **kwargs) -> None:
        return None

    @property
    def active(self) -> int:
        """Requests whose state is held."""
        return len(self._rows)

    def stats(self) -> dict:
        """Tokens drafted and accepted per source over the requests held now."""
        out = {f"{s}_{w}": 0 for s in SOURCES for w in ("drafted", "accepted")}
        for st in self._rows.values():
            for s in SOURCES:
                out[f"{s}_drafted"] += st.drafted[s]
                out[f"{s}_accepted"] += st.accepted[s]
        return out

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None,
                **_unused) -> list[list[int]]:
        """One draft chain (a list of token ids, maybe empty) per row of the batch."""
        now = self._clock()
        previous = self._rows
        claimed: set[int] = set()
        rows: dict[int, RequestChain] = {}
        decoding: dict[int, tuple[RequestChain, int]] = {}  # row -> (state, draft limit) of rows that sampled
        same_batch = len(sampled_token_ids) == len(previous)
        for i, sampled in enumerate(sampled_token_ids):
            n = int(num_tokens_no_spec[i])
            new = len(sampled) if sampled else 0
            row = token_ids_cpu[i]
            state = self._find(previous, claimed, i, row, n - new)
            if not new:  # partial prefill (or nothing committed): keep what we know, draft nothing
                same_batch = False
                if state is not None:
                    rows[i] = state
                continue
            if state is None:
                same_batch = False
                state = RequestChain(_ints(row[:n]), self.table, memory=self.memory, output_from=n - new,
                                     suffix_trees=self.suffix_trees, **self._chain_args)
                if self.trace is not None:
                    self.trace.of(state, n - new)
            else:
                source, drafted = state.last_source, len(state.last_draft)
                committed = _ints(row[n - new : n])
                got = state.advance(committed)
                if drafted:
                    self.source_acceptance[source].observe(got, drafted)
                # every candidate of the last call, drafted or not, as far as the committed tokens tell
                for kind, got_k, tried in state.outcomes:
                    self.kind_acceptance.observe(kind, got_k, tried)
                if self.trace is not None and (traced := self.trace.get(state)) is not None:
                    traced.decided(committed, got, state.outcomes, now)
            claimed.add(id(state))
            rows[i] = state
            # the engine places this step's token at n - 1; drafts must leave room for its bonus token
            decoding[i] = (state, min(self.k, self.max_model_len - n - 1))
        for state in previous.values():  # requests no row matched have finished or left the batch: their state goes
            if id(state) not in claimed:
                state.close()
                if self.trace is not None:
                    self.trace.close(state)
        self._rows = rows
        if self._last_call is not None and same_batch:
            # the same requests, all decoding: the time since the last call is one step over what it verified
            self.cost.add(self._last_verified, now - self._last_call, self._last_drafted, len(decoding))
        drafts = self._draft(decoding)
        if self.trace is not None:
            self._trace_proposals(decoding, drafts, now)
        self._calls += 1
        if self.budget and self._calls % LOG_EVERY == 0:
            fit = self.cost.fit()
            alphas = " ".join(f"{s} {self.source_acceptance[s].alpha():.2f}" for s in SOURCES)
            LOG.info("GooseProposer step budget: knee %.1f tokens (%s), jump %.1f ms, alpha %s, batch %d",
                     self.cost.knee, "measured" if fit else "prior", 1e3 * fit[1] if fit else 0.0, alphas, len(decoding))
        self._last_call = now
        self._last_verified = sum(1 + len(drafts.get(i, ())) for i in decoding)
        self._last_drafted = self._last_verified > len(decoding)
        return [drafts.get(i, []) for i in range(len(sampled_token_ids))]

    def _draft(self, decoding: dict[int, tuple[RequestChain, int]]) -> dict[int, list[int]]:
        """GOOSE's chain per decoding row, then (budget=cost) only the tokens the step budget keeps."""
        base = {s: a.alpha() for s, a in self.source_acceptance.items()}

        def expected(kind: tuple, chain: list[int]) -> float:  # tokens of a candidate chain expected to be accepted
            return sum(self.kind_acceptance.chances(kind, len(chain), base[kind[0]]))

        if not self.budget:
            return {i: st.propose(limit, expected) if limit > 0 else [] for i, (st, limit) in decoding.items()}
        floor = threshold(len(decoding), len(decoding), self.cost.knee)  # what even the step's first draft token must beat
        drafts: dict[int, list[int]] = {}
        chances: list[list[float]] = []
        order: list[int] = []
        for i, (st, limit) in decoding.items():
            alphas = {s: st.acceptance[s].alpha(base[s]) for s in SOURCES}
            draft = st.propose(limit, expected) if limit > 0 and max(alphas.values()) > floor else st.keep(0)
            order.append(i)
            chances.append(self._chances(st, alphas, base, len(draft)) if draft else [])
            drafts[i] = draft
        used = set()
        for i, n in zip(order, keep_paying(chances, self.cost)):
            st = decoding[i][0]
            if n:
                used.add(st.last_source)
            drafts[i] = st.keep(n)
            for s in SOURCES:
                if not (n and st.last_source == s):
                    st.acceptance[s].idle()
        for s, a in self.source_acceptance.items():
            if s not in used:
                a.idle()
        return drafts

    def _trace_proposals(self, decoding: dict, drafts: dict, began: float) -> None:
        """Hand each traced request the chain it was sent and what it was offered; the drafting time of the batch
        is shared out evenly."""
        now = self._clock()
        share = (now - began) / max(1, len(decoding))
        for i, (st, _limit) in decoding.items():
            traced = self.trace.get(st)
            if traced is not None:
                traced.proposed(st.tokens, drafts.get(i, []), st.last_source, st.offered,
                                {"batch": len(decoding)}, share, now)

    def _chances(self, st: RequestChain, alphas: dict, base: dict, n: int) -> list[float]:
        """The chance of each of the last proposal's ``n`` tokens to be accepted with those before it."""
        src = st.last_source
        if self.settings["chance"] == "request":
            return token_chances(alphas[src], n)
        # the request's own acceptance against every request's: only a request doing worse lowers its chances
        worse = min(1.0, alphas[src] / max(base[src], 1e-6))
        return [c * worse for c in self.kind_acceptance.chances(st.last_kind, n, base[src])]

    @staticmethod
    def _find(previous: dict[int, RequestChain], claimed: set[int], i: int, row, known: int):
        """The state of the request now in row ``i``: the same row as last call, else any moved one."""
        state = previous.get(i)
        if state is not None and id(state) not in claimed and state.same_request(row, known):
            claimed.add(id(state))
            return state
        for state in previous.values():
            if id(state) not in claimed and state.same_request(row, known):
                claimed.add(id(state))
                return state
        return None


def _ints(seq) -> list[int]:
    """Plain ints from a numpy row slice (or any sequence)."""
    return seq.tolist() if hasattr(seq, "tolist") else [int(t) for t in seq]
