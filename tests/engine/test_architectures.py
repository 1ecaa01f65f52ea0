"""Tree verification is exact on every common architecture, windows included: on tiny seeded random models of
Llama, Qwen2, Qwen3, Mistral, Gemma 2, Gemma 3, Phi-3, Llama 4 (chunked attention) and a single-KV-head
Llama, every tree node's logits equal a sequential pass over its path (trees crossing the window,
non-contiguous accepted paths, compaction over several steps), and every registered speculator is
token-identical to `ar`. Models goose cannot verify trees on exactly are refused with one sentence."""

from __future__ import annotations

import random

import pytest
import torch
import transformers as T

from drafting.engine.hf.attention import use_grouped_attention
from drafting.engine.decode import Decoder
from drafting.errors import UnsupportedModelError
from drafting.engine.hf.kv_cache import new_cache
from drafting.engine.loaded_model import LoadedModel
from drafting.engine.hf import transformers_forward
from drafting.models.model_facts import sliding_window_of
from drafting.speculators import create, registry
from drafting.engine.hf.model_support import attention_layout
from drafting.engine.tree import Draft, DraftRows, DraftTree
from drafting.engine.hf.forward import HFForward, keep_accepted
from support.flat_cost import FLAT

VOCAB, WINDOW, ATOL = 256, 8, 1e-4
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=512, bos_token_id=1, eos_token_id=VOCAB - 1, pad_token_id=0)


def _configs() -> dict:
    return {
        "llama": (T.LlamaConfig(**COMMON, num_hidden_layers=2), "sdpa"),
        "qwen2-bias-window": (T.Qwen2Config(**COMMON, num_hidden_layers=3, use_sliding_window=True,
                                            sliding_window=WINDOW, max_window_layers=1), "sdpa"),
        "qwen3-qk-norm": (T.Qwen3Config(**COMMON, num_hidden_layers=2, head_dim=16), "sdpa"),
        "mistral-window": (T.MistralConfig(**COMMON, num_hidden_layers=2, sliding_window=WINDOW), "sdpa"),
        "gemma2-softcap": (T.Gemma2Config(**COMMON, num_hidden_layers=4, head_dim=16, sliding_window=WINDOW,
                                          attn_logit_softcapping=20.0, final_logit_softcapping=15.0), "eager"),
        "gemma3": (T.Gemma3TextConfig(**COMMON, num_hidden_layers=4, head_dim=16, sliding_window=WINDOW,
                                      layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                                   "sliding_attention"], final_logit_softcapping=15.0), "sdpa"),
        "phi3-window": (T.Phi3Config(**COMMON, num_hidden_layers=2, sliding_window=WINDOW), "sdpa"),
        "llama-one-kv-head": (T.LlamaConfig(**dict(COMMON, num_key_value_heads=1), num_hidden_layers=2), "sdpa"),
        "llama4-chunked": (T.Llama4TextConfig(**COMMON, num_hidden_layers=2, no_rope_layers=[0, 1], head_dim=16,
                                              intermediate_size_mlp=128, num_local_experts=2, num_experts_per_tok=1,
                                              attention_chunk_size=WINDOW, attn_temperature_tuning=False), "sdpa"),
    }


ARCHS = list(_configs())
_BUILT: dict = {}


def tiny(arch: str) -> LoadedModel:
    """A seeded random model of ``arch`` in fp32, set up as load_model sets up a CPU model."""
    if arch not in _BUILT:
        config, impl = _configs()[arch]
        torch.manual_seed(0)
        net = T.AutoModelForCausalLM.from_config(config, attn_implementation=impl).eval()
        with torch.no_grad():  # larger weights than the init's: peaked logits, so greedy decoding has no near-ties
            for p in net.parameters():
                if p.dim() == 2:
                    p.mul_(4.0)
        use_grouped_attention(net)
        _BUILT[arch] = LoadedModel(make_forward=transformers_forward, model=net, tokenizer=None, name=f"tiny {arch}",
                                   device=torch.device("cpu"), dtype=torch.float32, eos_ids=set(), max_context=512,
                                   sliding_window=sliding_window_of(net.config), verify_cost=lambda: FLAT)
    return _BUILT[arch]


def sequential_logits(lm, ids: list[int]) -> torch.Tensor:
    """Logits of every position of a fresh causal pass (no cache, the model's own masks)."""
    with torch.inference_mode():
        return lm.model(input_ids=torch.tensor([ids]), position_ids=torch.arange(len(ids))[None]).logits[0]


def random_tree(rng: random.Random, root: int, size: int) -> DraftTree:
    """A random tree with deep chains (deeper than the window) and bushy branches."""
    tree = DraftTree(root)
    parent = 0
    for _ in range(rng.randrange(WINDOW, 2 * WINDOW)):  # a spine crossing the window
        parent = tree.add(rng.randrange(2, VOCAB - 1), parent, "context")
    while len(tree) < size:
        tree.add(rng.randrange(2, VOCAB - 1), rng.randrange(len(tree)), "adjacency")
    return tree


def _non_contiguous_path(rng: random.Random, tree: DraftTree) -> list[int]:
    paths = [tree.path_to(v) for v in range(len(tree))]
    odd = [p for p in paths if p != list(range(len(p))) and len(p) > 2]
    return rng.choice(odd)


@pytest.mark.parametrize("arch", ARCHS)
def test_tree_logits_equal_sequential_across_steps(arch):
    """Three tree steps, each compacted to a random non-contiguous path, across the window boundary."""
    lm = tiny(arch)
    rng = random.Random(ARCHS.index(arch))
    committed = [rng.randrange(2, VOCAB - 1) for _ in range(rng.randrange(3, 2 * WINDOW))]
    cache = new_cache(lm.model.config)
    fwd = HFForward(lm.model, lm.dtype, lm.device)
    fwd.prefill(committed[:-1], cache)
    for step in range(3):
        prefix_len = len(committed) - 1
        assert cache.get_seq_length() == prefix_len
        tree = random_tree(rng, committed[-1], rng.randrange(2 * WINDOW, 40))
        logits = fwd.step(Draft(tree=tree), cache)
        for leaf in range(len(tree)):
            path = tree.path_to(leaf)
            want = sequential_logits(lm, committed[:-1] + [tree.tokens[i] for i in path])[-1]
            assert torch.allclose(logits[leaf], want, atol=ATOL), f"step {step}, node {leaf} (depth {len(path) - 1})"
        path = _non_contiguous_path(rng, tree)
        keep_accepted(cache, prefix_len, path)
        committed = committed[:-1] + [tree.tokens[i] for i in path] + [rng.randrange(2, VOCAB - 1)]


@pytest.mark.parametrize("arch", ["mistral-window", "gemma3", "llama4-chunked"])
def test_draft_rows_honour_windows(arch):
    """In-model draft rows (offsets and visible lists, as PTD and Lookahead lay them) see exactly what a sequential
    pass over the rows they see would: a chain of rows past the window, riding after a tree."""
    lm = tiny(arch)
    rng = random.Random(5)
    committed = [rng.randrange(2, VOCAB - 1) for _ in range(2 * WINDOW)]
    cache = new_cache(lm.model.config)
    fwd = HFForward(lm.model, lm.dtype, lm.device)
    fwd.prefill(committed[:-1], cache)
    tree = random_tree(rng, committed[-1], 2 * WINDOW)
    t = len(tree)
    chain = [rng.randrange(2, VOCAB - 1) for _ in range(WINDOW + 3)]  # rows at offsets 1.. after the root
    rows = DraftRows(tokens=chain, offsets=list(range(1, len(chain) + 1)),
                     visible=[[0] + list(range(t, t + r)) for r in range(len(chain))])
    logits = fwd.step(Draft(tree=tree, rows=rows), cache)
    want = sequential_logits(lm, committed + chain)[len(committed):]
    assert torch.allclose(logits[t:], want, atol=ATOL)


PROMPTS = [[3, 17, 42, 99, 17, 42, 99, 5, 17, 42, 99, 5, 61, 3, 17, 42], [7, 8, 9, 10, 11, 12] * 3 + [7, 8]]


@pytest.mark.parametrize("arch", ARCHS)
def test_every_speculator_equals_ar(arch):
    lm = tiny(arch)
    names = [name for name in registry() if name != "ar"]
    assert {"pld", "tr", "iso", "goose", "lookahead", "ptd"} <= set(names)
    multi = non_contiguous = 0
    for prompt in PROMPTS:
        want = Decoder(lm, create("ar")).generate(prompt, 64)
        assert len(want.output_ids) == 64
        for name in names:
            got = Decoder(lm, create(name)).generate(prompt, 64)
            assert got.output_ids == want.output_ids, f"{name} differs from ar on {arch}"
            multi += got.mean_accepted > 1.3
            non_contiguous += sum(r.accepted != list(range(len(r.accepted))) for r in got.records)
    assert multi >= 4 and non_contiguous > 0  # trees really were accepted deep and off their first branches


def test_windows_are_read_per_layer_type():
    gemma3 = attention_layout(tiny("gemma3").model)
    assert gemma3.per_type and gemma3.rules == {"sliding_attention": ("window", WINDOW), "full_attention": None}
    mistral = attention_layout(tiny("mistral-window").model)
    assert not mistral.per_type and mistral.rules == {"sliding_attention": ("window", WINDOW)}
    llama4 = attention_layout(tiny("llama4-chunked").model)
    assert llama4.per_type and llama4.rules == {"chunked_attention": ("chunk", WINDOW), "full_attention": None}
    assert not attention_layout(tiny("llama").model).windowed
    assert tiny("phi3-window").sliding_window == WINDOW and tiny("llama").sliding_window is None


def _one_sentence(message: str) -> None:
    assert message.count(". ") == 0 and message.endswith(".") and "\n" not in message


def test_unsupported_attention_backend_is_refused_with_one_sentence():
    config = T.LlamaConfig(**COMMON, num_hidden_layers=1)
    torch.manual_seed(0)
    net = T.LlamaForCausalLM(config).eval()
    net.config._attn_implementation = "flash_attention_2"  # what loading with flash-attention sets
    lm = _wrapped(net, "tiny flash")
    with pytest.raises(UnsupportedModelError, match='attn_implementation="sdpa"') as err:
        Decoder(lm, create("pld"))
    _one_sentence(str(err.value))


def test_attention_that_follows_row_order_is_refused():
    """Llama 4's attention temperature (on its no-rope layers) is computed from the row index, not the position,
    so a tree's rows would get the wrong one."""
    config = T.Llama4TextConfig(**COMMON, num_hidden_layers=4, head_dim=16, intermediate_size_mlp=128,
                                num_local_experts=2, num_experts_per_tok=1, attention_chunk_size=WINDOW)
    torch.manual_seed(0)
    net = T.AutoModelForCausalLM.from_config(config).eval()
    lm = _wrapped(net, "tiny llama4")
    with pytest.raises(UnsupportedModelError, match="attn_temperature_tuning") as err:
        Decoder(lm, create("tr"))
    _one_sentence(str(err.value))


def test_hybrid_cache_is_refused_with_one_sentence():
    config = T.Qwen3NextConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
                               linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
                               num_experts=2, num_experts_per_tok=1, moe_intermediate_size=32,
                               shared_expert_intermediate_size=32, layer_types=["linear_attention", "full_attention"])
    torch.manual_seed(0)
    net = T.AutoModelForCausalLM.from_config(config).eval()
    lm = _wrapped(net, "tiny hybrid")
    with pytest.raises(UnsupportedModelError, match="'linear_attention' layers") as err:
        Decoder(lm, create("goose"))
    _one_sentence(str(err.value))
    Decoder(lm, create("ar"))  # plain decoding needs neither a tree mask nor a roll-back
    fwd = HFForward(net, torch.float32, torch.device("cpu"))
    cache = new_cache(net.config)
    fwd.prefill([5, 6, 7], cache)
    tree = DraftTree(8)
    tree.add(9, 0, "context")
    with pytest.raises(UnsupportedModelError):  # a library caller that skips the Decoder is stopped too
        fwd.step(Draft(tree=tree), cache)


def _wrapped(net, name: str):
    """A tiny float32 CPU network as the engine runs one, with the flat verify cost for ``budget=auto``."""
    return LoadedModel(make_forward=transformers_forward, model=net, tokenizer=None, name=name,
                       device=torch.device("cpu"), dtype=torch.float32, verify_cost=lambda: FLAT)
