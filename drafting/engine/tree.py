"""The draft of one step: a token tree (flat arrays) plus optional in-model draft rows.

Node 0 is the root: the last committed token, not yet in the KV cache. Every tree node sees the prefix, its
ancestors and itself, at position ``prefix_len + depth``. In-model draft rows (PTD, Lookahead) ride after the
tree with their own position offset and an explicit list of the step rows they see; their KV is never kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from drafting.engine.pinned import Staging

# Source tags: why a node is in the tree. Speculators may add their own strings.
ROOT = "root"
CONTEXT = "context"  # a context-matched (prompt lookup) chain
SPINE = "spine"  # GOOSE: the context chain laid as the trunk
SPINE_BRANCH = "spine-branch"  # GOOSE: adjacency successors hung off spine nodes
ROOT_ALT = "root-alt"  # GOOSE: adjacency alternatives hung off the root
ADJACENCY = "adjacency"  # Token Recycling table
POOL = "pool"  # n-gram / candidate pool (Lookahead, PTD guess tree)

_staging = Staging()  # step inputs on a GPU come through one reused pinned buffer


class DraftTree:
    """A token tree stored as flat lists; siblings always carry distinct tokens."""

    __slots__ = ("tokens", "parents", "depths", "sources", "_child")

    def __init__(self, root_token: int):
        self.tokens: list[int] = [int(root_token)]
        self.parents: list[int] = [-1]
        self.depths: list[int] = [0]
        self.sources: list[str] = [ROOT]
        self._child: dict[tuple[int, int], int] = {}

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int, source: str) -> int:
        """Add ``token`` under ``parent`` and return its index; a sibling with the same token is reused."""
        key = (parent, int(token))
        found = self._child.get(key)
        if found is not None:
            return found
        idx = len(self.tokens)
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.sources.append(source)
        self._child[key] = idx
        return idx

    def add_chain(self, tokens, parent: int, source: str) -> list[int]:
        """Add a chain of tokens below ``parent``; return the node indices."""
        out = []
        for t in tokens:
            parent = self.add(t, parent, source)
            out.append(parent)
        return out

    def child(self, parent: int, token: int) -> int | None:
        return self._child.get((parent, int(token)))

    def children(self) -> list[list[int]]:
        kids: list[list[int]] = [[] for _ in self.tokens]
        for i in range(1, len(self.tokens)):
            kids[self.parents[i]].append(i)
        return kids

    def path_to(self, node: int) -> list[int]:
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def visibility(self) -> np.ndarray:
        """(n, n) bool: row i sees column j iff j is i or an ancestor of i."""
        n = len(self.tokens)
        vis = np.zeros((n, n), dtype=bool)
        vis[0, 0] = True
        for i in range(1, n):
            vis[i] = vis[self.parents[i]]
            vis[i, i] = True
        return vis

    def truncate_depth(self, max_depth: int) -> "DraftTree":
        """A copy without nodes deeper than ``max_depth`` (used near the end of the context window)."""
        return self.subtree(i for i in range(1, len(self.tokens)) if self.depths[i] <= max_depth)

    def subtree(self, nodes) -> "DraftTree":
        """A copy with the root and ``nodes`` (ascending; a node whose parent is left out is dropped)."""
        out = DraftTree(self.tokens[0])
        remap = {0: 0}
        for i in nodes:
            if self.parents[i] in remap:
                remap[i] = out.add(self.tokens[i], remap[self.parents[i]], self.sources[i])
        return out


@dataclass
class DraftRows:
    """In-model draft rows that ride after the tree in the same forward pass.

    ``offsets[r]`` is the row's position relative to the prefix length (the root sits at 0);
    ``visible[r]`` lists the step rows (tree nodes 0..T-1, then draft rows T..) that row r attends to besides
    the prefix and itself.
    """

    tokens: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    visible: list[list[int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass
class Draft:
    """What a speculator proposes for one step."""

    tree: DraftTree
    rows: DraftRows | None = None
    info: dict = field(default_factory=dict)  # speculator-specific facts for the step record

    @property
    def size(self) -> int:
        return len(self.tree) + (len(self.rows) if self.rows else 0)


def step_inputs(draft: Draft, prefix_len: int, dtype: torch.dtype, device, layout=None):
    """Token ids (1, n), position ids (1, n) and the additive 4-D mask (1, 1, n, prefix_len + n).

    ``layout`` (drafting.engine.model_support.AttentionLayout) names the windowed layer types: each then gets its own mask,
    handed over as a dict keyed by layer type when the model mixes types. The mask is None when a plain causal
    mask is right (a single chain with no rows): the model then builds its own, windows included, and attention
    can take its fast path. Only the n x n block of step rows comes from the host; the rest is made on
    ``device``.
    """
    tree, rows = draft.tree, draft.rows
    t = len(tree)
    tokens = list(tree.tokens)
    positions = [prefix_len + d for d in tree.depths]
    is_chain = all(p == i - 1 for i, p in enumerate(tree.parents))
    if rows:
        tokens += rows.tokens
        positions += [prefix_len + o for o in rows.offsets]
    n = len(tokens)
    on_host = getattr(device, "type", device) == "cpu"  # a torch.device or a plain name
    if is_chain and not rows:
        if on_host:
            return torch.tensor([tokens], dtype=torch.long), torch.tensor([positions], dtype=torch.long), None
        packed = _staging.to_device(tokens + positions, device)
        return packed[:n][None], packed[n:][None], None
    vis = np.zeros((n, n), dtype=bool)
    vis[:t, :t] = tree.visibility()
    if rows:
        for r, seen in enumerate(rows.visible):
            vis[t + r, seen] = True
            vis[t + r, t + r] = True
    if on_host:
        ids = torch.tensor([tokens], dtype=torch.long)
        pos = torch.tensor([positions], dtype=torch.long)
        hidden = torch.from_numpy(~vis)
    else:
        packed = _staging.to_device(np.concatenate([np.array([tokens, positions]).reshape(-1), vis.reshape(-1)]),
                                    device)
        ids, pos = packed[:n][None], packed[n : 2 * n][None]
        hidden = packed[2 * n :].view(n, n) == 0
    return ids, pos, tree_mask(hidden, pos[0], prefix_len, dtype, layout)


def tree_mask(hidden: torch.Tensor, positions: torch.Tensor, prefix_len: int, dtype: torch.dtype, layout=None):
    """The additive mask of a step whose rows hide ``hidden`` (n, n) of each other and see the whole prefix,
    narrowed per layer type of ``layout`` to what sequential decoding would see: a row at position p sees a key
    at position k (cached keys sit at their index) only when p - k < window, or, for chunked attention, when
    both fall in the same chunk."""
    n = hidden.shape[0]
    low = torch.finfo(dtype).min
    full = torch.zeros((1, 1, n, prefix_len + n), dtype=dtype, device=hidden.device)
    full[0, 0, :, prefix_len:].masked_fill_(hidden, low)
    if layout is None or not layout.windowed:
        return full
    keys = torch.arange(prefix_len + n, device=hidden.device)
    keys[prefix_len:] = positions
    masks = {}
    for layer_type, rule in layout.rules.items():
        if rule is None:
            masks[layer_type] = full
            continue
        kind, size = rule
        if kind == "window":
            far = keys[None, :] <= positions[:, None] - size
        else:
            far = keys[None, :] // size != positions[:, None] // size
        masks[layer_type] = full.masked_fill(far, low)
    return masks if layout.per_type else next(iter(masks.values()))
