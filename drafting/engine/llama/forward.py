"""llama.cpp's ``Forward`` (drafting.engine.forward): a draft tree verified in one ``llama_decode`` through sequence ids.

llama.cpp lets a token attend to every cached cell that shares one of its sequence ids at a position up to its own.
So a tree is one batch in which each leaf gets a sequence id of its own and every node carries the ids of the
leaves below it, at position prefix + depth; the prefix is copied (as bookkeeping) to each leaf's sequence first.
A node then sees the prefix, its ancestors and itself, as sequential decoding would. In-model draft rows (PTD,
Lookahead) hang in the same forest: a row's parent is the row it sees at the largest position, and what it sees
must be exactly that parent's ancestry. A chain needs no borrowed sequence at all: it runs on the cache's own.

After acceptance the accepted leaf's sequence is cut at the accepted depth and its cells given to the cache's
sequence; the borrowed sequences are dropped, and with them every rejected cell.
"""

from __future__ import annotations

import weakref

import numpy as np
import torch

from drafting.engine.llama.net import LlamaNet
from drafting.engine.phase_clock import PhaseClock
from drafting.engine.tree import Draft
from drafting.errors import EngineError


class LlamaCache:
    """A KV cache on llama.cpp: the cells of one sequence id of the net's context, holding positions
    0..length-1. Its sequence id goes back to the net when the cache is dropped."""

    def __init__(self, net: LlamaNet):
        self.net = net
        self.seq = net.claim(1)[0]
        self.length = 0
        self.scratch: list[int] = []  # sequences a tree step borrowed for its leaves, until keep or crop
        self.leaf_of: list[int] | None = None  # the last tree step's node -> a leaf sequence below it
        self.dirty = False  # a step ran and its rows are not yet kept or dropped
        weakref.finalize(self, _give_back, net, [self.seq], self.scratch)

    def get_seq_length(self) -> int:
        return self.length


def _give_back(net: LlamaNet, own: list[int], scratch: list[int]) -> None:
    net.release(own + scratch)
    scratch.clear()


class LlamaForward:
    def __init__(self, net: LlamaNet):
        self.net = net
        self.context = net.n_ctx
        self.clock = PhaseClock([])  # llama.cpp hands logits back once the pass is done: host time is right
        self.unsupported = None  # every tree and draft row a speculator makes can be tagged (checked per step)

    def new_cache(self) -> LlamaCache:
        return LlamaCache(self.net)

    def prefill(self, ids: list[int], cache: LlamaCache, logit_rows: int | None = None) -> torch.Tensor:
        net = self.net
        self._tidy(cache)
        n = len(ids)
        first_wanted = 0 if logit_rows is None else max(0, n - max(1, logit_rows))
        size = net.settings.batch
        kept = []
        for start in range(0, n, size):
            m = min(size, n - start)
            net.tokens[:m] = ids[start : start + m]
            net.positions[:m] = np.arange(cache.length, cache.length + m)
            net.n_seq_ids[:m] = 1
            for i in range(m):
                net.seq_ids[i][0] = cache.seq
            wanted = max(0, first_wanted - start)
            net.wants_logits[:m] = 0
            net.wants_logits[wanted:m] = 1
            net.decode(m)
            cache.length += m
            if wanted < m:
                kept.append(np.array(net.logits(m - wanted)))  # a copy: the next piece overwrites the buffer
        return torch.from_numpy(np.concatenate(kept) if len(kept) > 1 else kept[0])

    def step(self, draft: Draft, cache: LlamaCache) -> torch.Tensor:
        net = self.net
        self._tidy(cache)
        n = draft.size
        if n > net.settings.batch:
            raise EngineError(f"A draft of {n} rows is larger than a llama.cpp pass takes ({net.settings.batch}).")
        prefix = cache.length
        tree = draft.tree
        parents = list(tree.parents)
        positions = [prefix + d for d in tree.depths]
        tokens = list(tree.tokens)
        if draft.rows:
            _hang_rows(draft, parents, positions, prefix)
            tokens += draft.rows.tokens
        net.tokens[:n] = tokens
        net.positions[:n] = positions
        net.wants_logits[:n] = 1
        cache.dirty = True
        if all(p == i - 1 for i, p in enumerate(parents)):  # a chain: the cache's own sequence, nothing borrowed
            net.n_seq_ids[:n] = 1
            for i in range(n):
                net.seq_ids[i][0] = cache.seq
            cache.leaf_of = None
        else:
            cache.leaf_of = self._tag_leaves(cache, parents)
        net.decode(n)
        return torch.from_numpy(net.logits(n))

    def _tag_leaves(self, cache: LlamaCache, parents: list[int]) -> list[int]:
        """Give each leaf a borrowed sequence (holding the prefix) and tag every node with the sequences of the
        leaves below it; returns, per node, one leaf sequence below it."""
        net = self.net
        n = len(parents)
        has_child = [False] * n
        for p in parents[1:]:
            has_child[p] = True
        leaves = [i for i in range(n) if not has_child[i]]
        seqs = net.claim(len(leaves))
        cache.scratch.extend(seqs)
        counts = [0] * n
        leaf_of = [-1] * n
        for leaf, s in zip(leaves, seqs):
            net.lib.llama_memory_seq_cp(net.memory, cache.seq, s, -1, -1)
            v = leaf
            while v >= 0:
                net.seq_ids[v][counts[v]] = s
                counts[v] += 1
                if leaf_of[v] < 0:
                    leaf_of[v] = s
                v = parents[v]
        net.n_seq_ids[:n] = counts
        return leaf_of

    def keep(self, cache: LlamaCache, prefix_len: int, path: list[int]) -> None:
        net, mem, lib = self.net, self.net.memory, self.net.lib
        end = prefix_len + len(path)
        if cache.leaf_of is None:  # a chain: the accepted nodes are its first ones
            lib.llama_memory_seq_rm(mem, cache.seq, end, -1)
        else:
            leaf = cache.leaf_of[path[-1]]
            lib.llama_memory_seq_rm(mem, leaf, end, -1)
            lib.llama_memory_seq_cp(mem, leaf, cache.seq, prefix_len, end)
            self._drop_borrowed(cache)
        cache.length = end
        cache.dirty = False

    def crop(self, cache: LlamaCache, n: int) -> int:
        self._tidy(cache)
        keep = max(0, min(n, cache.length))
        self.net.lib.llama_memory_seq_rm(self.net.memory, cache.seq, keep, -1)
        cache.length = keep
        return keep

    def _tidy(self, cache: LlamaCache) -> None:
        """Drop what an interrupted step left (rows past ``length``, borrowed sequences) before the next pass."""
        if not cache.dirty:
            return
        self.net.lib.llama_memory_seq_rm(self.net.memory, cache.seq, cache.length, -1)
        self._drop_borrowed(cache)
        cache.dirty = False

    def _drop_borrowed(self, cache: LlamaCache) -> None:
        self.net.release(cache.scratch)
        cache.scratch.clear()
        cache.leaf_of = None


def _hang_rows(draft: Draft, parents: list[int], positions: list[int], prefix: int) -> None:
    """Append each draft row's parent and position: its parent is the step row it sees at the largest position,
    and what it sees must be exactly that row's ancestry (the only visibility sequence ids can express)."""
    rows = draft.rows
    for r, (offset, seen) in enumerate(zip(rows.offsets, rows.visible)):
        me = len(parents)
        if not seen or any(not 0 <= v < me for v in seen):
            raise EngineError(f"Draft row {r} sees no earlier step row; llama.cpp rows must hang from the tree.")
        parent = max(seen, key=lambda v: positions[v])
        ancestry = set()
        v = parent
        while v >= 0:
            ancestry.add(v)
            v = parents[v]
        if set(seen) != ancestry or prefix + offset != positions[parent] + 1:
            raise EngineError(f"Draft row {r} sees rows that are not one chain from the root ending one position "
                              "before it, which llama.cpp's sequence ids cannot express.")
        parents.append(parent)
        positions.append(prefix + offset)
