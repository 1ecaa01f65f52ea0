"""Tree steps of grouped-query models never copy the KV cache, on any device's path: no step calls transformers'
``repeat_kv`` (SDPA-loaded and eager-loaded families alike), the step's logits equal the model's own eager
attention, and the largest tensor a tree step makes does not grow with the number of query heads per KV head —
while transformers' own path, measured the same way, does."""

from __future__ import annotations

import copy
import random
import sys

import pytest
import torch
import transformers as T
from torch.utils._python_dispatch import TorchDispatchMode

from drafting.engine.hf.attention import EAGER_NAME, NAME, use_grouped_attention
from drafting.engine.hf.forward import HFForward, keep_accepted
from drafting.engine.hf.kv_cache import new_cache
from drafting.engine.tree import Draft, DraftTree

VOCAB = 128
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_attention_heads=8, num_key_value_heads=2,
              max_position_embeddings=1024, bos_token_id=1, eos_token_id=VOCAB - 1, pad_token_id=0)
FAMILIES = {
    "llama": (lambda: T.LlamaConfig(**COMMON, num_hidden_layers=2), "sdpa", NAME),
    "qwen3": (lambda: T.Qwen3Config(**COMMON, num_hidden_layers=2, head_dim=16), "sdpa", NAME),
    "gemma2-eager-softcap": (lambda: T.Gemma2Config(**COMMON, num_hidden_layers=2, head_dim=16, sliding_window=8,
                                                    attn_logit_softcapping=20.0), "eager", EAGER_NAME),
    "mistral-eager-window": (lambda: T.MistralConfig(**COMMON, num_hidden_layers=2, sliding_window=8), "eager",
                             EAGER_NAME),
}


def _net(config, impl: str) -> torch.nn.Module:
    torch.manual_seed(0)
    net = T.AutoModelForCausalLM.from_config(config, attn_implementation=impl).eval()
    with torch.no_grad():  # peaked logits, so comparisons are not between near-ties
        for p in net.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    return net


def _tree(rng: random.Random, root: int, size: int) -> DraftTree:
    tree = DraftTree(root)
    parent = 0
    for _ in range(6):
        parent = tree.add(rng.randrange(2, VOCAB - 1), parent, "context")
    while len(tree) < size:
        tree.add(rng.randrange(2, VOCAB - 1), rng.randrange(len(tree)), "adjacency")
    return tree


def refuse_repeat_kv(monkeypatch) -> None:
    """Every ``repeat_kv`` transformers has loaded (the modeling modules of the models built so far included)
    raises until the test ends."""
    def refuse(*args, **kwargs):
        raise AssertionError("repeat_kv was called: the KV cache was copied")

    for name, module in list(sys.modules.items()):
        if name.startswith("transformers.") and hasattr(module, "repeat_kv"):
            monkeypatch.setattr(module, "repeat_kv", refuse)


@pytest.mark.parametrize("family", FAMILIES)
def test_tree_steps_never_repeat_kv_and_equal_eager_attention(family, monkeypatch):
    make, impl, grouped = FAMILIES[family]
    net = _net(make(), impl)
    refuse_repeat_kv(monkeypatch)
    eager = copy.deepcopy(net)
    eager.set_attn_implementation("eager")
    use_grouped_attention(net)
    assert net.config._attn_implementation == grouped
    rng = random.Random(1)
    committed = [rng.randrange(2, VOCAB - 1) for _ in range(20)]
    cache = new_cache(net.config)
    fwd = HFForward(net, torch.float32, torch.device("cpu"))
    fwd.prefill(committed[:-1], cache)  # prefill too: SDPA runs it grouped, eager families on the stacked path
    for _step in range(2):
        prefix = len(committed) - 1
        tree = _tree(rng, committed[-1], 14)
        logits = fwd.step(Draft(tree=tree), cache)
        for leaf in range(len(tree)):
            ids = committed[:-1] + [tree.tokens[i] for i in tree.path_to(leaf)]
            with torch.inference_mode(), pytest.MonkeyPatch.context() as undo:
                undo.setattr(sys.modules[type(eager).__module__], "repeat_kv", _plain_repeat_kv)
                want = eager(input_ids=torch.tensor([ids]), position_ids=torch.arange(len(ids))[None]).logits[0, -1]
            assert torch.allclose(logits[leaf], want, atol=1e-4), f"{family}: node {leaf}"
        path = tree.path_to(len(tree) - 1)
        keep_accepted(cache, prefix, path)
        committed = committed[:-1] + [tree.tokens[i] for i in path] + [rng.randrange(2, VOCAB - 1)]


def _plain_repeat_kv(hidden: torch.Tensor, n_rep: int) -> torch.Tensor:
    """transformers' repeat_kv, for the eager reference pass only (refused to the code under test)."""
    return hidden.repeat_interleave(n_rep, dim=1)


class LargestTensor(TorchDispatchMode):
    """The most elements of any tensor an operation makes while the mode is on."""

    def __init__(self):
        super().__init__()
        self.most = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.most = max(self.most, t.numel())
        return out


def _largest_in_a_tree_step(query_heads: int, grouped: bool) -> int:
    """The largest tensor one 16-node tree step makes after 512 cached tokens, with 2 KV heads of 128 and
    ``query_heads`` query heads."""
    config = T.LlamaConfig(**dict(COMMON, hidden_size=64 * query_heads, num_attention_heads=query_heads,
                                  head_dim=128), num_hidden_layers=1)
    net = _net(config, "eager")
    if grouped:
        use_grouped_attention(net)
    cache = new_cache(net.config)
    fwd = HFForward(net, torch.float32, torch.device("cpu"))
    rng = random.Random(0)
    fwd.prefill([rng.randrange(2, VOCAB - 1) for _ in range(512)], cache)
    tree = _tree(rng, 5, 16)
    with LargestTensor() as seen:
        fwd.step(Draft(tree=tree), cache)
    return seen.most


def test_a_tree_steps_largest_tensor_does_not_grow_with_query_heads_per_kv_head():
    """The keys after 512 tokens (and a 16-node step) are 2 x 528 x 128 = 135,168 elements; copied for 8 query heads per KV
    head they are 8 times that. Grouped, the largest tensor a step makes is the same at 2 and at 8 query heads per
    KV head (the cache's own growth); transformers' eager path, measured alike, grows with them."""
    grouped = {heads: _largest_in_a_tree_step(heads, grouped=True) for heads in (4, 16)}
    copied = {heads: _largest_in_a_tree_step(heads, grouped=False) for heads in (4, 16)}
    assert grouped[16] == grouped[4]
    assert copied[16] >= 4 * copied[4] > 4 * grouped[4]  # the measure sees a copy when there is one
