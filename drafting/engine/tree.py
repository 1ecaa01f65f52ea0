"""The draft of one step: a token tree (flat arrays) plus optional in-model draft rows.

Node 0 is the root: the last committed token, not yet in the KV cache. Every tree node sees the prefix, its
ancestors and itself, at position ``prefix_len + depth``. In-model draft rows (PTD, Lookahead) ride after the
tree with their own position offset and an explicit list of the step rows they see; their KV is never kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Source tags: why a node is in the tree. Speculators may add their own strings.
ROOT = "root"
CONTEXT = "context"  # a context-matched (prompt lookup) chain
SPINE = "spine"  # GOOSE: the context chain laid as the trunk
SPINE_BRANCH = "spine-branch"  # GOOSE: adjacency successors hung off spine nodes
ROOT_ALT = "root-alt"  # GOOSE: adjacency alternatives hung off the root
ADJACENCY = "adjacency"  # Token Recycling table
MEMORY = "memory"  # GOOSE: a chain read from earlier answers (drafting.sources.output_memory)
OWN_TEXT = "own"  # GOOSE: a chain read from the text so far as a memory (output_memory.TextMemory)
ALIGNED = "aligned"  # a chain read from the text the answer is copying, at its pointer (sources.aligned)
POOL = "pool"  # n-gram / candidate pool (Lookahead, PTD guess tree)
SPINE_TAGS = frozenset({SPINE, ALIGNED})  # GOOSE's trunk: the spine, whichever source it was laid from

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
