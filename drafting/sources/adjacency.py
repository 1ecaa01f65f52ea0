"""The adjacency table (Token Recycling): for every vocabulary token, the top-k tokens the model last
predicted after it, with their probabilities (normalised over the top-k); plus a bigram tier keyed by (previous token, token), consulted
first because it carries one more token of context.

It is filled from logits the verifier computed anyway: the prefill and every forward pass, at every row,
rejected tree nodes included. A harvest is one top-k on the device, one host transfer (in a decoding step,
the step's one copy of what it reads off the device: drafting.engine.step_reads) and vectorised array writes;
the table lives in numpy arrays (V x k) so that lookups on the drafting hot path are plain indexing. It
persists across prompts (hot start) and can be saved to / loaded from a file.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch

from drafting.disk_cache import replaced_when_done
from drafting.engine.step_reads import StepReads

FORMAT = 1


class AdjacencyCacheError(ValueError):
    """An adjacency cache file cannot be read or belongs to another vocabulary; one sentence."""


class DamagedAdjacencyCache(AdjacencyCacheError):
    """The file is not an adjacency table (cut short, another file): nothing in it is worth keeping."""

    def __init__(self, path, why: str):
        super().__init__(f"The adjacency cache {path} cannot be read ({why}).")
        self.why = why


class AdjacencyTable:
    """Top-k successor table with a bigram tier. ``successors(prev, tok)`` is the lookup."""

    def __init__(self, k: int = 10, bigram: bool = True, bigram_capacity: int = 1 << 20):
        self.k = k
        self.bigram = bigram
        self.bigram_capacity = bigram_capacity
        self.vocab = 0
        self.succ = np.zeros((0, k), dtype=np.int32)  # -1 = empty slot
        self.score = np.zeros((0, k), dtype=np.float32)
        self._bi_slot: dict[int, int] = {}  # prev * vocab + tok -> row of the bigram arrays
        self.bi_succ = np.zeros((0, k), dtype=np.int32)
        self.bi_score = np.zeros((0, k), dtype=np.float32)

    # -- shape -------------------------------------------------------------------------------------------
    def _ensure_vocab(self, vocab: int) -> None:
        if vocab == self.vocab:
            return
        # a different vocabulary (another model) makes every entry meaningless: start empty
        self.vocab = vocab
        self.succ = np.full((vocab, self.k), -1, dtype=np.int32)
        self.score = np.zeros((vocab, self.k), dtype=np.float32)
        self._bi_slot = {}
        self.bi_succ = np.full((1024, self.k), -1, dtype=np.int32)
        self.bi_score = np.zeros((1024, self.k), dtype=np.float32)

    def _bigram_slots(self, keys: list[int]) -> np.ndarray:
        slots = np.empty(len(keys), dtype=np.int64)
        table = self._bi_slot
        for j, key in enumerate(keys):  # one dict probe per harvested row, never per vocabulary entry
            s = table.get(key)
            if s is None:
                if len(table) >= self.bigram_capacity:  # full: forget the tier and start it again
                    table.clear()
                s = len(table)
                table[key] = s
            slots[j] = s
        need = int(slots.max()) + 1 if len(slots) else 0
        if need > len(self.bi_succ):
            size = max(need, 2 * len(self.bi_succ))
            grow = size - len(self.bi_succ)
            self.bi_succ = np.concatenate([self.bi_succ, np.full((grow, self.k), -1, dtype=np.int32)])
            self.bi_score = np.concatenate([self.bi_score, np.zeros((grow, self.k), dtype=np.float32)])
        return slots

    # -- harvest -----------------------------------------------------------------------------------------
    def harvest(self, tokens, prev_tokens, rows: torch.Tensor | StepReads) -> None:
        """Row i of ``rows`` (logits, or a step's reads of them) predicts the token after ``tokens[i]``, whose
        predecessor is ``prev_tokens[i]`` (-1 when unknown: only the unigram row is written)."""
        n = len(tokens)
        if n == 0:
            return
        reads = rows if isinstance(rows, StepReads) else StepReads(rows)
        self._ensure_vocab(int(reads.logits.shape[-1]))
        # scores are the softmax over the top-k only (StepReads.top): a full log-sum-exp would double the cost
        # of a harvest (another pass over rows x vocab) for a small correction on flat distributions
        succ, score = reads.top(self.k, n)
        toks = np.asarray(tokens, dtype=np.int64)
        self.succ[toks] = succ
        self.score[toks] = score
        if self.bigram:
            prev = np.asarray(prev_tokens, dtype=np.int64)
            known = np.nonzero(prev >= 0)[0]
            if len(known):
                keys = (prev[known] * self.vocab + toks[known]).tolist()
                slots = self._bigram_slots(keys)
                self.bi_succ[slots] = succ[known]
                self.bi_score[slots] = score[known]

    def harvest_prefill(self, ids: list[int], logits: torch.Tensor) -> None:
        """``logits`` are those of the last ``len(logits)`` positions of ``ids``."""
        n = min(len(ids), int(logits.shape[0]))
        prev = [-1] + list(ids[:-1])
        self.harvest(ids[len(ids) - n :], prev[len(ids) - n :], logits[-n:] if n else logits[:0])

    def harvest_tree(self, tree, before_root: int, rows: torch.Tensor | StepReads) -> None:
        """Tree rows: node i's logits follow ``tokens[i]`` given its ancestors; its predecessor is its parent's
        token (the context token before the root, for the root)."""
        toks = tree.tokens
        prev = [before_root] + [toks[p] for p in tree.parents[1:]]
        self.harvest(toks, prev, rows)

    # -- lookup ------------------------------------------------------------------------------------------
    def successors(self, prev: int, tok: int, use_bigram: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, scores) after ``tok``, best first; the bigram tier wins when it has an entry."""
        if tok >= self.vocab or tok < 0:
            return _EMPTY_I, _EMPTY_F
        if (self.bigram if use_bigram is None else use_bigram) and prev >= 0:
            s = self._bi_slot.get(prev * self.vocab + tok)
            if s is not None:
                row = self.bi_succ[s]
                n = int((row >= 0).sum())
                return row[:n], self.bi_score[s, :n]
        row = self.succ[tok]
        n = int((row >= 0).sum())
        return row[:n], self.score[tok, :n]

    def __len__(self) -> int:
        """Vocabulary rows that hold successors."""
        return int((self.succ[:, 0] >= 0).sum()) if self.vocab else 0

    # -- persistence -------------------------------------------------------------------------------------
    def save(self, path) -> None:
        """Write the table to ``path`` through a temporary of this process, renamed into place when whole (a
        crash or another process saving at once never leaves a mix); OSError where it cannot be written."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.fromiter(self._bi_slot.keys(), dtype=np.int64, count=len(self._bi_slot))
        slots = np.fromiter(self._bi_slot.values(), dtype=np.int64, count=len(self._bi_slot))
        with replaced_when_done(path) as tmp, open(tmp, "wb") as fh:
            np.savez(
                fh, format=FORMAT, k=self.k, vocab=self.vocab, succ=self.succ, score=self.score,
                bi_keys=keys, bi_succ=self.bi_succ[slots], bi_score=self.bi_score[slots],
            )

    def load(self, path) -> None:
        try:
            with np.load(Path(path)) as data:
                if int(data["format"]) != FORMAT or int(data["k"]) != self.k:
                    raise AdjacencyCacheError(
                        f"The adjacency cache {path} was written with other settings (k={int(data['k'])}); "
                        f"delete it or use k={int(data['k'])}."
                    )
                vocab = int(data["vocab"])
                succ, score = data["succ"], data["score"]
                keys, bi_succ, bi_score = data["bi_keys"], data["bi_succ"], data["bi_score"]
        except AdjacencyCacheError:
            raise
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise DamagedAdjacencyCache(path, str(exc) or type(exc).__name__) from None
        self.vocab = 0
        self._ensure_vocab(vocab)
        self.succ[:] = succ
        self.score[:] = score
        if self.bigram and len(keys):
            slots = self._bigram_slots(keys.tolist())
            self.bi_succ[slots] = bi_succ
            self.bi_score[slots] = bi_score


_EMPTY_I = np.zeros(0, dtype=np.int32)
_EMPTY_F = np.zeros(0, dtype=np.float32)
