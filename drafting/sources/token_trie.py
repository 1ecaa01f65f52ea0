"""PTD's candidate pool: one trie per key token holding continuations seen after it, at most ``max_nodes``
nodes per key, the least recently touched leaf evicted first (so a trie never loses an inner node before its
descendants). Inserting a path touches every node on it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Node:
    token: int
    parent: "_Node | None"
    stamp: int
    children: dict = field(default_factory=dict)  # token -> _Node


class TokenTrie:
    """Continuations after one key token."""

    def __init__(self, key: int, max_nodes: int):
        self.root = _Node(int(key), None, 0)
        self.max_nodes = max_nodes
        self.size = 0  # nodes below the root

    def insert(self, path, stamp: int) -> None:
        node = self.root
        node.stamp = stamp
        for t in path:
            t = int(t)
            nxt = node.children.get(t)
            if nxt is None:
                nxt = node.children[t] = _Node(t, node, stamp)
                self.size += 1
            nxt.stamp = stamp
            node = nxt
        while self.size > self.max_nodes:
            self._evict_oldest_leaf()

    def _evict_oldest_leaf(self) -> None:
        oldest = None
        stack = list(self.root.children.values())
        while stack:
            n = stack.pop()
            if n.children:
                stack.extend(n.children.values())
            elif oldest is None or n.stamp < oldest.stamp:
                oldest = n
        del oldest.parent.children[oldest.token]
        self.size -= 1

    def paths(self) -> list[list[int]]:
        """Every root-to-leaf continuation, most recently touched first."""
        out = []
        stack = [(self.root, [])]
        while stack:
            node, path = stack.pop()
            if not node.children:
                if path:
                    out.append((node.stamp, path))
                continue
            for child in node.children.values():
                stack.append((child, path + [child.token]))
        out.sort(key=lambda sp: -sp[0])
        return [p for _, p in out]

    def path_first(self, limit: int) -> list[tuple[int, int]]:
        """Up to ``limit`` (token, parent index) pairs depth-first, the most recently touched child first: the
        latest continuation comes whole before any alternative (a node's stamp is its newest descendant's)."""
        out: list[tuple[int, int]] = []
        stack = [(c, -1) for c in sorted(self.root.children.values(), key=lambda c: c.stamp)]
        while stack and len(out) < limit:
            node, parent = stack.pop()
            out.append((node.token, parent))
            here = len(out) - 1
            stack.extend((c, here) for c in sorted(node.children.values(), key=lambda c: c.stamp))
        return out

    def breadth_first(self, limit: int) -> list[tuple[int, int]]:
        """Up to ``limit`` (token, parent index) pairs in breadth-first order, recent children first; parent
        index -1 is the key itself. A parent always comes before its children."""
        out: list[tuple[int, int]] = []
        frontier = [(self.root, -1)]
        while frontier and len(out) < limit:
            nxt = []
            for node, idx in frontier:
                for child in sorted(node.children.values(), key=lambda c: -c.stamp):
                    if len(out) >= limit:
                        break
                    out.append((child.token, idx))
                    nxt.append((child, len(out) - 1))
            frontier = nxt
        return out


class TriePool:
    """Key token -> TokenTrie; a step counter orders insertions."""

    def __init__(self, max_nodes: int = 60):
        self.max_nodes = max_nodes
        self._tries: dict[int, TokenTrie] = {}
        self._clock = 0

    def __len__(self) -> int:
        return sum(t.size for t in self._tries.values())

    def keys(self) -> int:
        return len(self._tries)

    def clear(self) -> None:
        self._tries.clear()

    def tick(self) -> None:
        self._clock += 1

    def insert(self, key: int, path) -> None:
        if not path or self.max_nodes < 1:
            return
        trie = self._tries.get(int(key))
        if trie is None:
            trie = self._tries[int(key)] = TokenTrie(key, self.max_nodes)
        trie.insert(path, self._clock)

    def get(self, key: int) -> TokenTrie | None:
        return self._tries.get(int(key))

    def seed(self, tokens, n: int) -> None:
        """Insert every n-gram of ``tokens`` (key = first token), later n-grams counting as more recent."""
        toks = list(tokens)
        for i in range(len(toks) - n + 1):
            self.insert(toks[i], toks[i + 1 : i + n])
            self.tick()
