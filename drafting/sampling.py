"""Sampling settings and the acceptor that verifies a draft tree under them.

Temperature 0 is greedy decoding. Above 0 the acceptor is lossless tree sampling (REFERENCE §6): the emitted
tokens are distributed exactly as plain sampling from the warped target, whatever the speculator drafted.

For deterministic drafts (every speculator here proposes tokens, not distributions), at a node v with warped
target distribution p the children are tried in order: child x is accepted with probability r(x), where r starts
as p; on rejection r(x) is set to 0 and r renormalised. If no child is accepted, y ~ r is emitted and the step
ends; if one is, the walk continues from it with its own p. A node without children emits a bonus y ~ p.

All siblings of a node are decided on the device at once: with q_j = p(x_j) and m_j = 1 - sum_{i<j} q_i (the
mass r still has before child j is tried), child j is accepted with probability r(x_j) = q_j / m_j, i.e. when
u_j * m_j < q_j for a uniform u_j. The first accepted child wins; the residual sample is drawn alongside, so each
visited node costs one host sync, and only the rows the walk visits are warped.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .decode import Acceptor, greedy_acceptor
from .tree import DraftTree


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0  # 0 = no top-k cut
    top_p: float = 1.0  # 1 = no nucleus cut
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def check(self) -> None:
        """Raise ValueError (one sentence) for impossible settings."""
        if self.temperature < 0:
            raise ValueError("--temperature must be 0 (greedy) or positive.")
        if self.top_k < 0:
            raise ValueError("--top-k must be 0 (off) or a positive number of tokens.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("--top-p must be in (0, 1].")

    def describe(self) -> str:
        """Short text for summaries: 'greedy' or 'T=0.7 top-k=50 top-p=0.9 seed=1'."""
        if self.greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        if self.top_k:
            parts.append(f"top-k={self.top_k}")
        if self.top_p < 1.0:
            parts.append(f"top-p={self.top_p:g}")
        if self.seed is not None:
            parts.append(f"seed={self.seed}")
        return " ".join(parts)


def warp(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The warped target distribution of one row (or a batch of rows): temperature, then top-k, then top-p.

    Top-p keeps the smallest set of most likely tokens whose probability reaches ``top_p`` (the most likely token
    always stays). Computed in float32 whatever the model's dtype. The same function serves plain sampling and
    tree verification, so both sample from the same distribution.
    """
    x = logits.float()
    if params.temperature != 1.0:
        x = x / params.temperature
    vocab = x.shape[-1]
    k = params.top_k if 0 < params.top_k < vocab else 0
    if k == 0 and params.top_p >= 1.0:
        return torch.softmax(x, dim=-1)
    if k == 0 and x.dim() == 1 and x.device.type == "cpu":
        probs = torch.softmax(x, dim=-1)
        for probe in _NUCLEUS_PROBES:
            if probe >= vocab:
                break
            fast = _nucleus_from_top(probs, params.top_p, probe)
            if fast is not None:
                return fast
    if k:
        vals, idx = x.topk(k, dim=-1)  # sorted, most likely first
    else:
        vals, idx = x.sort(dim=-1, descending=True)
    if params.top_p < 1.0:
        probs = torch.softmax(vals, dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass of the more likely tokens
        vals = vals.masked_fill(before >= params.top_p, float("-inf"))
    kept = torch.full_like(x, float("-inf")).scatter(-1, idx, vals)
    return torch.softmax(kept, dim=-1)


# Candidates looked at before sorting the whole vocabulary for top-p (top-k of 256 costs 0.07 ms at 49k tokens
# on this CPU, of 1024 0.4 ms, a full sort 3 ms).
_NUCLEUS_PROBES = (256, 1024)


def _nucleus_from_top(probs: torch.Tensor, top_p: float, probe: int) -> torch.Tensor | None:
    """Top-p of one row of probabilities from its ``probe`` most likely tokens, the same set a full sort keeps;
    None when those tokens carry less than ``top_p`` (the nucleus reaches further)."""
    vals, idx = probs.topk(probe)
    cum = vals.cumsum(0)
    if float(cum[-1]) < top_p:
        return None
    vals = vals.masked_fill(cum - vals >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(0, idx, vals)
    return kept / kept.sum()


def sample(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """One token drawn from unnormalised ``weights`` (V,) by inverting the CDF at ``uniform`` (shape (1,)).

    Much cheaper than torch.multinomial over a large vocabulary; a token of weight 0 is never drawn.
    """
    cdf = weights.cumsum(0)
    total = cdf[-1:]
    v = torch.minimum(uniform * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, v, right=True)


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
    ``logits`` are ignored. The random generator is seeded once (``seed``) and lives on the logits' device.
    """

    def __init__(self, params: SamplingParams):
        params.check()
        self.params = params
        self._gen: torch.Generator | None = None

    def generator(self, device: torch.device) -> torch.Generator:
        if self._gen is None or self._gen.device != torch.device(device):
            gen = torch.Generator(device=device)
            if self.params.seed is None:
                gen.seed()
            else:
                gen.manual_seed(self.params.seed)
            self._gen = gen
        return self._gen

    def __call__(self, tree: DraftTree, logits: torch.Tensor) -> tuple[list[int], int]:
        # The walk's vocabulary-sized element-wise ops are microseconds on one thread, but each one split
        # across threads waits for every core: on a busy 2-core CPU that was ~8 ms per op instead of 6 µs.
        threads = torch.get_num_threads()
        if logits.device.type != "cpu" or threads == 1:
            return self._walk(tree, logits)
        torch.set_num_threads(1)
        try:
            return self._walk(tree, logits)
        finally:
            torch.set_num_threads(threads)

    def _walk(self, tree: DraftTree, logits: torch.Tensor) -> tuple[list[int], int]:
        gen = self.generator(logits.device)
        kids = _distinct_children(tree)
        node, path = 0, [0]
        while True:
            p = warp(logits[node], self.params)
            nodes = kids[node]
            uniforms = torch.rand(len(nodes) + 1, generator=gen, device=p.device)
            if not nodes:  # end of the accepted path: the bonus token
                return path, int(sample(p, uniforms))
            tokens = torch.tensor([tree.tokens[i] for i in nodes], device=p.device)
            first, residual = sibling_choice(p, tokens, uniforms[:-1])
            y = sample(residual, uniforms[-1:])
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
