"""The acceptance rules: which nodes of a verified draft tree are accepted, and the bonus token after them.

An acceptor turns a tree and the target's logits for it into (accepted node indices, root first; bonus token).
Greedy (temperature 0): walk from the root while a child carries the target's argmax; the bonus is the argmax
at the last accepted node. Sampled (temperature > 0): lossless tree sampling (speculative sampling's rejection
rule, tried child by child), so the emitted tokens are distributed exactly as plain sampling from the warped
target, whatever the speculator drafted.

For deterministic drafts (every speculator here proposes tokens, not distributions), at a node v with warped
target distribution p the children are tried in order: child x is accepted with probability r(x), where r starts
as p; on rejection r(x) is set to 0 and r renormalised. If no child is accepted, y ~ r is emitted and the step
ends; if one is, the walk continues from it with its own p. A node without children emits a bonus y ~ p.

All siblings of a node are decided on the device at once: with q_j = p(x_j) and m_j = 1 - sum_{i<j} q_i (the
mass r still has before child j is tried), child j is accepted with probability r(x_j) = q_j / m_j, i.e. when
u_j * m_j < q_j for a uniform u_j. The first accepted child wins; the residual sample is drawn alongside, so each
visited node costs one host sync, and only the rows the walk visits are warped. Every node's children tokens go
to the device in one copy a step and every node's uniforms are drawn in one call, whichever nodes are visited.
"""

from __future__ import annotations

import inspect
from typing import Callable

import torch

from drafting.engine.sampling import sample, warp
from drafting.engine.sampling_params import SamplingParams
from drafting.engine.step_reads import StepReads, one_cpu_thread
from drafting.engine.tree import DraftTree

# (tree, its step's logits) -> (accepted nodes, bonus token); one that also takes ``reads`` gets the step's host
# reads of the logits (drafting.engine.step_reads), so what it reads comes off the device with the rest
Acceptor = Callable[..., tuple[list[int], int]]


def takes_reads(acceptor: Acceptor) -> bool:
    """Whether ``acceptor`` has a ``reads`` parameter (the built-in ones do; one written before them does not)."""
    try:
        return "reads" in inspect.signature(acceptor).parameters
    except (TypeError, ValueError):  # a callable whose signature cannot be read
        return False


def greedy_accept(tree: DraftTree, argmax: list[int]) -> tuple[list[int], int]:
    """Walk from the root while a child carries the target's argmax; return (accepted nodes, bonus token)."""
    node = 0
    path = [0]
    while True:
        nxt = tree.child(node, argmax[node])
        if nxt is None:
            return path, argmax[node]
        path.append(nxt)
        node = nxt


def greedy_acceptor(tree: DraftTree, logits: torch.Tensor, reads: StepReads | None = None) -> tuple[list[int], int]:
    """Greedy acceptance over the tree's rows of ``logits`` (draft rows after the tree are ignored), their argmax
    read through the step's ``reads`` (its one copy off the device)."""
    return greedy_accept(tree, (reads or StepReads(logits[: len(tree)])).argmax())


def sibling_choice(
    p: torch.Tensor, child_tokens: torch.Tensor, uniforms: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-candidate rejection at one node, on the device.

    ``p``: warped distribution (V,); ``child_tokens``: the children's distinct tokens in the order they are tried;
    ``uniforms``: one U(0,1) per child. Returns (index of the first accepted child, or len(children) when all are
    rejected; the residual r, unnormalised: p with every child's token removed, or p itself when the children
    carry all of its mass so the residual is never used).
    """
    q = p[child_tokens]
    mass_left = 1.0 - (q.cumsum(0) - q)
    accept = uniforms * mass_left < q
    first = torch.cat([accept, accept.new_ones(1)]).to(torch.int8).argmax()
    residual = p.index_fill(0, child_tokens, 0.0)
    residual = torch.where(residual.sum() > 0, residual, p)
    return first, residual


class TreeSampler:
    """Lossless sampling acceptor for trees, chains and plain decoding (a one-node tree).

    Only rows < len(tree) are read, so draft rows of in-model drafting (PTD, Lookahead) that follow the tree in
    ``logits`` are ignored. The random generator is seeded once (``seed``) and lives on the logits' device; it
    is made by ``new_generator`` (torch.Generator; tests pass a stand-in to check the device it is asked for).
    """

    def __init__(self, params: SamplingParams, new_generator=torch.Generator):
        params.check()
        self.params = params
        self._new_generator = new_generator
        self._gen: torch.Generator | None = None

    def generator(self, device: torch.device) -> torch.Generator:
        """The sampler's generator on ``device``, made and seeded the first time (again when the device changes)."""
        if self._gen is None or self._gen.device != torch.device(device):
            gen = self._new_generator(device=device)
            if self.params.seed is None:
                gen.seed()
            else:
                gen.manual_seed(self.params.seed)
            self._gen = gen
        return self._gen

    def __call__(self, tree: DraftTree, logits: torch.Tensor, reads: StepReads | None = None) -> tuple[list[int], int]:
        # The walk's vocabulary-sized element-wise ops are tiny on one thread, but each one split across
        # threads waits for every core, which on a busy machine costs far more than the op (docs/measurements.md).
        with one_cpu_thread(logits):
            return self._walk(tree, logits)

    def _walk(self, tree: DraftTree, logits: torch.Tensor) -> tuple[list[int], int]:
        gen = self.generator(logits.device)
        kids = _distinct_children(tree)
        # node v's children are child_tokens[start[v]:start[v + 1]]; its uniforms, one per child and one for its
        # residual or bonus token, are uniforms[start[v] + v : start[v + 1] + v + 1]
        start = [0]
        flat: list[int] = []
        for nodes in kids:
            flat.extend(tree.tokens[i] for i in nodes)
            start.append(len(flat))
        child_tokens = torch.tensor(flat, dtype=torch.long).to(logits.device, non_blocking=True) if flat else None
        uniforms = torch.rand(len(flat) + len(kids), generator=gen, device=logits.device)
        node, path = 0, [0]
        while True:
            p = warp(logits[node], self.params)
            nodes = kids[node]
            a, b = start[node], start[node + 1]
            own = uniforms[a + node : b + node + 1]
            if not nodes:  # end of the accepted path: the bonus token
                return path, int(sample(p, own))
            first, residual = sibling_choice(p, child_tokens[a:b], own[:-1])
            y = sample(residual, own[-1:])
            chosen, token = torch.cat([first.view(1), y]).tolist()  # the one host sync of this node
            if chosen == len(nodes):
                return path, token
            node = nodes[chosen]
            path.append(node)


def _distinct_children(tree: DraftTree) -> list[list[int]]:
    """Children of every node in insertion order with repeated sibling tokens merged.

    DraftTree already keeps siblings distinct; a tree built otherwise is still verified exactly: a repeated
    sibling folds into its first copy, and its subtree hangs under that copy (same tokens at the same positions,
    so their logits and cached keys are those of the merged path).
    """
    kids: list[list[int]] = [[] for _ in tree.tokens]
    canon = list(range(len(tree.tokens)))
    first: dict[tuple[int, int], int] = {}
    for i in range(1, len(tree.tokens)):
        key = (canon[tree.parents[i]], tree.tokens[i])
        if key in first:
            canon[i] = first[key]
        else:
            first[key] = i
            kids[key[0]].append(i)
    return kids


def make_acceptor(params: SamplingParams) -> Acceptor:
    """The acceptor for these settings: greedy walk at temperature 0, lossless tree sampling above.

    Each call returns a fresh acceptor (its own generator seeded with ``params.seed``).
    """
    params.check()
    if params.greedy:
        return greedy_acceptor
    return TreeSampler(params)
