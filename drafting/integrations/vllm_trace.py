"""GooseProposer's steps as goose traces (setting ``trace=DIR``): one file per request that `goose viz` replays like a
trace of goose's own engines.

Each step of a request is one record: the chain sent to vLLM as a one-branch tree after the last committed token
(its nodes tagged with the source it came from), every candidate the proposer was offered in ``info["offered"]``
(source, length, and how many of its tokens the engine's committed tokens agreed with), and, once the next call
tells it, how many draft tokens the engine accepted and the tokens it committed. A request's last proposal has no
verdict (the request leaves the batch before the proposer sees its tokens), so it is not written.

Bounded: at most ``MAX_REQUESTS`` files per proposer (the first requests; a log line says when tracing stops), each
holding one record per engine step of its request. Off (the default), the proposer holds no tracer at all.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from drafting.engine.trace import StepRecord, TraceWriter
from drafting.engine.tree import ADJACENCY, ALIGNED, MEMORY, OWN_TEXT, ROOT, SPINE

LOG = logging.getLogger("vllm.goose")
MAX_REQUESTS = 512

# the proposer's source names -> the tree tags goose's viewer colours (drafting.engine.tree)
TAGS = {"spine": SPINE, "own": OWN_TEXT, "memory": MEMORY, "aligned": ALIGNED, "suffix": "suffix",
        "table": ADJACENCY}


class RequestTrace:
    """One request's file: its steps, each written when the engine's verdict on it arrives."""

    def __init__(self, path: Path, header: dict, answer_from: int, tokenizer=None):
        self.writer = TraceWriter(path, header, tokenizer=tokenizer)
        self.answer_from = answer_from
        self.step = 0
        self.pending: StepRecord | None = None
        self.proposed_at = 0.0

    def proposed(self, tokens: list[int], chain: list[int], source: str, offered: list, info: dict,
                 draft_s: float, now: float) -> None:
        tag = TAGS.get(source, source)
        self.pending = StepRecord(
            step=self.step, position=len(tokens) - self.answer_from, tokens=[tokens[-1], *chain],
            parents=list(range(-1, len(chain))), sources=[ROOT] + [tag] * len(chain), accepted=[0], emitted=[],
            draft_s=draft_s, verify_s=0.0,
            info={"route": "chain", "spine_source": tag if chain else "none",
                  "offered": [[TAGS.get(kind[0], kind[0]), len(c)] for kind, c in offered], **info})
        self.proposed_at = now

    def decided(self, committed: list[int], got: int, outcomes: list, now: float) -> None:
        record, self.pending = self.pending, None
        if record is None:
            return
        record.accepted = list(range(got + 1))
        record.emitted = list(committed)
        record.verify_s = now - self.proposed_at  # the engine's step (and the rest of the batch's drafting)
        for entry, (_kind, agreed, _tried) in zip(record.info["offered"], outcomes):
            entry.append(agreed)
        self.writer.write(record)
        self.step += 1

    def close(self) -> None:
        self.writer.close()


class ProposerTrace:
    """The trace files of one proposer: a folder, one file per request (process id and a count in its name)."""

    def __init__(self, folder: str, header: dict, tokenizer=None, max_requests: int = MAX_REQUESTS):
        self.folder = Path(folder).expanduser()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.header = header
        self.tokenizer = tokenizer
        self.max_requests = max_requests
        self.opened = 0
        self.requests: dict[int, RequestTrace] = {}  # id of a request's state -> its file

    def of(self, state, answer_from: int) -> RequestTrace | None:
        """The file of ``state``'s request, opened at its first step (None once the bound is reached)."""
        found = self.requests.get(id(state))
        if found is not None or self.opened >= self.max_requests:
            return found
        self.opened += 1
        if self.opened == self.max_requests:
            LOG.info("GooseProposer trace: %d requests traced in %s; later requests are not", self.opened, self.folder)
        path = self.folder / f"vllm-{os.getpid()}-{self.opened:05d}.jsonl"
        found = self.requests[id(state)] = RequestTrace(
            path, {**self.header, "prompt_tokens": answer_from}, answer_from, self.tokenizer)
        return found

    def get(self, state) -> RequestTrace | None:
        return self.requests.get(id(state))

    def close(self, state) -> None:
        found = self.requests.pop(id(state), None)
        if found is not None:
            found.close()


def tokenizer_of(model_config):
    """The model's tokenizer for the traces' token text, or None (the viewer then shows token ids)."""
    name = getattr(model_config, "tokenizer", None) or getattr(model_config, "model", None)
    if not name:
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(name, trust_remote_code=bool(getattr(model_config, "trust_remote_code",
                                                                                  False)))
    except Exception:  # a tokenizer transformers cannot load: ids are still a trace
        return None
