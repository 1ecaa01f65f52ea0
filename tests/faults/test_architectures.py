"""Every decoder-only family transformers ships is either proven exact for tree steps or refused in one sentence.

A family on ``EXACT_FAMILIES`` gets a tiny random model (tests/support/tiny_families.py) whose tree-step logits,
over two steps with a non-contiguous compaction between them, must equal the model's own sequential pass (no
position ids, no mask: positions and masks as the family makes them). The families whose positions come from
somewhere else (GPT-2 and OPT, learned absolute positions; GPT-NeoX, rotary; Falcon without ALiBi) also decode
token-identically to ``ar`` with every speculator. ALiBi families (Bloom, MPT, Falcon with ``alibi=True``),
encoder-decoder decoders that count positions from the cache, and encoders are refused when a tree speculator's
Decoder is built, and ``ar`` still decodes them as their own ``generate`` does.
"""

from __future__ import annotations

import random

import pytest
import torch
from transformers import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from drafting.engine.decode import Decoder
from drafting.engine.hf.forward import HFForward, keep_accepted
from drafting.engine.hf.kv_cache import new_cache
from drafting.engine.loaded_model import LoadedModel
from drafting.engine.hf import transformers_forward
from drafting.engine.hf.model_support import EXACT_FAMILIES, REFUSED_FAMILIES, attention_layout
from drafting.engine.tree import Draft, DraftTree
from drafting.errors import UnsupportedModelError
from drafting.machine.verify_cost import with_verify_cost
from drafting.speculators import create, registry
from support.tiny_families import VOCAB, tiny_family_model

ATOL = 1e-4
SHIPPED = sorted(set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) & set(CONFIG_MAPPING))


def _own_logits(net, ids: list[int]) -> torch.Tensor:
    """Logits of a fresh pass as the family runs itself: no cache, no position ids, no mask."""
    with torch.inference_mode():
        return net(input_ids=torch.tensor([ids])).logits[0].float()


def _tree(rng: random.Random, root: int) -> DraftTree:
    tree = DraftTree(root)
    tree.add_chain([rng.randrange(2, VOCAB - 1) for _ in range(4)], 0, "context")
    while len(tree) < 10:
        tree.add(rng.randrange(2, VOCAB - 1), rng.randrange(len(tree)), "adjacency")
    return tree


def tree_error(net, seed: int = 0) -> float:
    """The largest logit difference between two tree steps and sequential passes over every node's path."""
    rng = random.Random(seed)
    fwd = HFForward(net, torch.float32, torch.device("cpu"))
    committed = [rng.randrange(2, VOCAB - 1) for _ in range(7)]
    cache = new_cache(net.config)
    fwd.prefill(committed[:-1], cache)
    worst = 0.0
    for _ in range(2):
        prefix_len = len(committed) - 1
        tree = _tree(rng, committed[-1])
        logits = fwd.step(Draft(tree=tree), cache).float()
        leaves = set(range(len(tree))) - set(tree.parents)
        for leaf in leaves:  # one pass per leaf scores every node on its path
            path = tree.path_to(leaf)
            want = _own_logits(net, committed[:-1] + [tree.tokens[i] for i in path])[prefix_len:]
            worst = max(worst, (logits[path] - want).abs().max().item())
        path = max((tree.path_to(v) for v in range(len(tree)) if tree.path_to(v) != list(range(tree.depths[v] + 1))),
                   key=len)  # off the first branch, so compaction moves rows
        keep_accepted(cache, prefix_len, path)
        committed = committed[:-1] + [tree.tokens[i] for i in path] + [rng.randrange(2, VOCAB - 1)]
    return worst


def _loaded(net, name: str) -> LoadedModel:
    return with_verify_cost(LoadedModel(make_forward=transformers_forward, model=net, tokenizer=None, name=name, device=torch.device("cpu"),
                                        dtype=torch.float32, eos_ids=set(), max_context=512))


def _one_sentence(message: str) -> None:
    assert message.count(". ") == 0 and message.endswith(".") and "\n" not in message, message


def _own_greedy(net, prompt: list[int], n: int) -> list[int]:
    """The family's own plain decoding: argmax one token at a time, through transformers' own cache and with
    positions and masks as the family makes them (generate would stop at or hide the random model's EOS)."""
    out, ids, cache = [], torch.tensor([prompt]), None
    with torch.inference_mode():
        for _ in range(n):
            step = net(input_ids=ids, cache=cache, use_cache=True)
            cache = step.past_key_values
            ids = step.logits[:, -1:].argmax(-1)
            out.append(int(ids))
    return out


@pytest.mark.parametrize("family", sorted(EXACT_FAMILIES & set(SHIPPED)))
def test_exact_family_scores_trees_as_it_scores_sequences(family):
    extra = {"attn_temperature_tuning": False} if family == "llama4_text" else {}
    net = tiny_family_model(family, **extra)
    attention_layout(net)  # not refused
    assert tree_error(net) < ATOL


def test_every_shipped_causal_lm_family_has_a_verdict():
    """The lists name families transformers really ships (a typo would prove or refuse nothing)."""
    assert EXACT_FAMILIES <= set(SHIPPED) and set(REFUSED_FAMILIES) <= set(SHIPPED)
    assert not EXACT_FAMILIES & set(REFUSED_FAMILIES)


PROMPTS = [[3, 17, 42, 99, 17, 42, 99, 5, 17, 42], [7, 8, 9, 10, 11, 12, 7, 8, 9]]
NAMED_EXACT = {"gpt2": {}, "opt": {}, "gpt_neox": {}, "falcon": {"alibi": False}}


@pytest.mark.parametrize("family", NAMED_EXACT)
def test_every_speculator_equals_ar_on_families_with_their_own_positions(family):
    lm = _loaded(tiny_family_model(family, **NAMED_EXACT[family]), f"tiny {family}")
    for prompt in PROMPTS:
        want = Decoder(lm, create("ar")).generate(prompt, 12).output_ids
        assert want == _own_greedy(lm.model, prompt, 12)
        for name in registry():
            assert Decoder(lm, create(name)).generate(prompt, 12).output_ids == want, f"{name} differs on {family}"


NAMED_REFUSED = {"bloom": ({}, "ALiBi"), "mpt": ({}, "ALiBi"), "falcon": ({"alibi": True}, "alibi=True"),
                 "bart": ({}, "counts positions"), "roberta": ({"is_decoder": True}, "encoder family"),
                 "blenderbot": ({}, "counts positions")}


@pytest.mark.parametrize("family", NAMED_REFUSED)
def test_refused_family_says_why_before_any_draft_and_ar_still_decodes_it(family):
    extra, why = NAMED_REFUSED[family]
    lm = _loaded(tiny_family_model(family, **extra), f"tiny {family}")
    for name in ("goose", "pld", "ptd"):
        with pytest.raises(UnsupportedModelError, match=why) as err:
            Decoder(lm, create(name))
        _one_sentence(str(err.value))
    for prompt in PROMPTS:
        assert Decoder(lm, create("ar")).generate(prompt, 12).output_ids == _own_greedy(lm.model, prompt, 12)


def test_a_family_not_proven_is_refused_with_a_plain_sentence():
    net = tiny_family_model("gpt2")
    net.config.model_type = "my_remote_gpt"  # what a remote-code model reports
    with pytest.raises(UnsupportedModelError, match="has not proven tree steps exact") as err:
        Decoder(_loaded(net, "tiny custom"), create("goose"))
    _one_sentence(str(err.value))


@pytest.mark.parametrize("family", ["roberta", "xlm-roberta", "camembert", "data2vec-text"])
def test_ar_leaves_positions_to_families_that_offset_them(family):
    """RoBERTa-style models number positions from past the padding index; plain decoding must not hand them
    positions counted from zero."""
    net = tiny_family_model(family, is_decoder=True)
    lm = _loaded(net, f"tiny {family}")
    for prompt in PROMPTS:
        assert Decoder(lm, create("ar")).generate(prompt, 12).output_ids == _own_greedy(net, prompt, 12)
