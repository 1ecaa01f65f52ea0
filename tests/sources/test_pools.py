"""The n-gram pool (Lookahead) and the trie pool (PTD): insert, recency and eviction."""

from drafting.sources.ngram_pool import NgramPool
from drafting.sources.token_trie import TokenTrie, TriePool


def test_ngram_pool_keeps_g_per_key_and_evicts_least_recently_used():
    pool = NgramPool(per_key=2)
    pool.add(1, [2, 3])
    pool.add(1, [4, 5])
    pool.add(1, [2, 3])  # touched again: now most recent
    pool.add(1, [6, 7])  # evicts (4, 5), the least recently used
    assert pool.get(1) == [(6, 7), (2, 3)]
    assert pool.get(9) == []
    assert len(pool) == 2


def test_ngram_pool_seed_keys_by_first_token():
    pool = NgramPool(per_key=7)
    pool.seed([1, 2, 3, 1, 2, 4], 3)
    assert pool.get(1) == [(2, 4), (2, 3)]
    assert pool.get(3) == [(1, 2)]
    assert pool.get(1, limit=1) == [(2, 4)]


def test_trie_evicts_oldest_leaf_first_and_never_an_inner_node():
    trie = TokenTrie(key=0, max_nodes=4)
    trie.insert([1, 2], stamp=1)
    trie.insert([1, 3], stamp=2)  # shares node 1
    trie.insert([5], stamp=3)
    assert trie.size == 4
    trie.insert([6], stamp=4)  # over the cap: leaf 2 (stamp 1) goes, node 1 (inner, stamp 2) stays
    assert trie.size == 4
    assert sorted(trie.paths()) == [[1, 3], [5], [6]]
    trie.insert([7, 8], stamp=5)  # two new nodes: leaves 3 then 1 become oldest
    assert trie.size == 4
    assert trie.paths() == [[7, 8], [6], [5]]


def test_trie_breadth_first_puts_parents_before_children_recent_first():
    trie = TokenTrie(key=0, max_nodes=10)
    trie.insert([1, 2, 3], stamp=1)
    trie.insert([4, 5], stamp=2)
    nodes = trie.breadth_first(10)
    assert nodes == [(4, -1), (1, -1), (5, 0), (2, 1), (3, 3)]
    assert trie.breadth_first(3) == nodes[:3]


def test_trie_pool_per_key_and_seed():
    pool = TriePool(max_nodes=3)
    pool.seed([1, 2, 3, 4, 1, 2, 5], 3)
    assert pool.get(1).paths() == [[2, 5], [2, 3]]
    assert pool.get(9) is None
    assert pool.keys() == 4
    for i in range(10):
        pool.insert(7, [i])
        pool.tick()
    assert pool.get(7).size == 3
    assert sorted(pool.get(7).paths()) == [[7], [8], [9]]


def test_trie_path_first_lays_the_latest_continuation_whole_first():
    trie = TokenTrie(1, 60)
    trie.insert([2, 3, 4], stamp=1)
    trie.insert([5, 6], stamp=2)
    trie.insert([2, 7], stamp=3)
    got = trie.path_first(10)
    assert got == [(2, -1), (7, 0), (3, 0), (4, 2), (5, -1), (6, 4)]
    assert trie.path_first(3) == got[:3]
    for i, (_, parent) in enumerate(got):
        assert parent < i
