"""The step's fast paths: grouped-query tree attention without KV copies, and the buffered KV cache."""

from __future__ import annotations

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from drafting.engine.hf.attention import NAME, grouped_sdpa
from drafting.engine.hf.kv_cache import BufferedLayer, new_cache
from drafting.engine.hf.forward import keep_accepted


class _Module:
    num_key_value_groups = 3
    is_causal = True


def test_grouped_attention_equals_transformers_repeat_path():
    """Also across masks: the stacked mask is kept between the layers of a step, never reused for another."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 9, 5, 16), torch.randn(1, 3, 12, 16), torch.randn(1, 3, 12, 16)
    for _ in range(3):
        visible = torch.rand(5, 12) > 0.4
        visible[:, 0] = True
        mask = torch.zeros(1, 1, 5, 12).masked_fill(~visible, torch.finfo(torch.float32).min)
        for _layer in range(2):
            got, _ = grouped_sdpa(_Module(), q, k, v, mask, scaling=0.25)
            want, _ = sdpa_attention_forward(_Module(), q, k, v, mask, scaling=0.25)
            assert got.shape == want.shape == (1, 5, 9, 16)
            assert torch.allclose(got, want, atol=1e-6)


def test_one_unmasked_row_is_stacked_and_equals_transformers_path():
    torch.manual_seed(0)
    for dtype, tol in ((torch.float32, 1e-6), (torch.bfloat16, 1e-2)):
        q, k, v = (torch.randn(1, 9, 1, 16, dtype=dtype), torch.randn(1, 3, 40, 16, dtype=dtype),
                   torch.randn(1, 3, 40, 16, dtype=dtype))
        got, _ = grouped_sdpa(_Module(), q, k, v, None, scaling=0.25)
        want, _ = sdpa_attention_forward(_Module(), q, k, v, None, scaling=0.25)
        assert got.shape == want.shape == (1, 1, 9, 16)
        assert torch.allclose(got.float(), want.float(), atol=tol)


def test_grouped_attention_hands_every_argument_it_does_not_implement_to_transformers():
    """Sinks, position bias, dropout and a window no mask applies go to the model's own implementation; only
    bookkeeping arguments, soft-capping, and a window that the given mask applies stay on the grouped path."""
    from drafting.engine.hf.attention import _grouped_can_take

    assert _grouped_can_take({"position_ids": torch.zeros(1, 3), "use_cache": True, "sliding_window": None}, False)
    assert _grouped_can_take({"sliding_window": 8}, True) and _grouped_can_take({"softcap": 30.0}, True)
    assert not _grouped_can_take({"sliding_window": 8}, False)
    for key in ("s_aux", "position_bias", "anything_new"):
        assert not _grouped_can_take({key: torch.ones(3)}, True), key
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 9, 5, 16), torch.randn(1, 3, 12, 16), torch.randn(1, 3, 12, 16)
    mask = torch.zeros(1, 1, 5, 12)
    bias = torch.randn(1, 9, 5, 12)
    got, _ = grouped_sdpa(_Module(), q, k, v, mask, scaling=0.25, position_bias=bias)
    want, _ = sdpa_attention_forward(_Module(), q, k, v, mask, scaling=0.25, position_bias=bias)
    plain, _ = grouped_sdpa(_Module(), q, k, v, mask, scaling=0.25)
    assert torch.allclose(got, want, atol=1e-6) and not torch.allclose(got, plain, atol=1e-3)


def test_soft_capped_grouped_attention_equals_gemma2_eager_attention():
    """Soft-capping is computed on the stacked rows as Gemma 2's eager attention computes it on repeated heads,
    with an additive mask and with a boolean one."""
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

    from drafting.engine.hf.attention import grouped_eager

    class Gemma2Like(_Module):
        training = False

    torch.manual_seed(0)
    q, k, v = torch.randn(1, 9, 5, 16) * 3, torch.randn(1, 3, 12, 16) * 3, torch.randn(1, 3, 12, 16)
    visible = torch.rand(5, 12) > 0.4
    visible[:, 0] = True
    additive = torch.zeros(1, 1, 5, 12).masked_fill(~visible, torch.finfo(torch.float32).min)
    want, _ = eager_attention_forward(Gemma2Like(), q, k, v, additive, scaling=0.25, softcap=5.0)
    uncapped, _ = eager_attention_forward(Gemma2Like(), q, k, v, additive, scaling=0.25)
    for mask in (additive, visible[None, None]):
        got, _ = grouped_eager(Gemma2Like(), q, k, v, mask, scaling=0.25, softcap=5.0)
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5)
        assert not torch.allclose(got, uncapped, atol=1e-3)  # the cap really changed the result


def test_buffered_layer_with_values_narrower_than_keys_keeps_the_path():
    """Keys and values of different widths (two buffers instead of one) grow and compact alike."""
    layer = BufferedLayer()
    keys, values = torch.randn(1, 2, 1100, 8), torch.randn(1, 2, 1100, 4)
    layer.update(keys[:, :, :1000], values[:, :, :1000])
    layer.update(keys[:, :, 1000:], values[:, :, 1000:])
    layer.keep(1000, torch.tensor([1000, 1003, 1050]))
    want = [*range(1000), 1000, 1003, 1050]
    assert torch.equal(layer.keys, keys[:, :, want]) and torch.equal(layer.values, values[:, :, want])


def test_tiny_test_model_runs_the_grouped_path(tiny_lm):
    assert tiny_lm.model.config._attn_implementation == NAME


def test_buffered_cache_grows_crops_and_compacts(tiny_lm):
    cache = new_cache(tiny_lm.model.config)
    assert all(isinstance(layer, BufferedLayer) for layer in cache.layers)
    layer = cache.layers[0]
    chunks = [torch.randn(1, 2, n, 8) for n in (700, 500, 3)]  # crosses the first capacity
    for c in chunks:
        keys, values = layer.update(c, -c)
    full = torch.cat(chunks, dim=2)
    assert torch.equal(keys, full) and torch.equal(values, -full) and layer.get_seq_length() == 1203
    layer.crop(-3)
    assert layer.get_seq_length() == 1200 and torch.equal(layer.keys, full[:, :, :1200])
    for other in cache.layers[1:]:
        other.update(full[:, :, :1203].clone(), full[:, :, :1203].clone())
        other.crop(-3)
    # a step of 3 rows after 1200 cached; keep rows 0 and 2: row 2 must move next to row 0
    step = torch.randn(1, 2, 3, 8)
    for lay in cache.layers:
        lay.update(step, step)
    keep_accepted(cache, 1200, [0, 2])
    assert cache.get_seq_length() == 1202
    assert torch.equal(layer.keys[:, :, 1200], step[:, :, 0]) and torch.equal(layer.keys[:, :, 1201], step[:, :, 2])
    assert torch.equal(layer.keys[:, :, :1200], full[:, :, :1200])


def test_prefill_logits_only_for_speculators_that_read_them(flat_tiny_lm):
    from drafting.engine.decode import Decoder
    from drafting.speculators import create
    from drafting.engine.hf.forward import HFForward

    fwd = HFForward(flat_tiny_lm.model, flat_tiny_lm.dtype, flat_tiny_lm.device)
    ids = [5, 17, 33, 2, 90, 41, 7]
    full = fwd.prefill(ids, new_cache(flat_tiny_lm.model.config))
    last = fwd.prefill(ids, new_cache(flat_tiny_lm.model.config), 1)
    assert full.shape[0] == len(ids) and last.shape[0] == 1
    assert torch.allclose(last[0], full[-1], atol=1e-5)

    seen = {}
    for name in ("ar", "pld", "goose", "goose:harvest=off", "goose:harvest_window=3"):
        spec = create(name)
        spec.observe_prefill = lambda _ids, logits, name=name: seen.__setitem__(name, logits)
        Decoder(flat_tiny_lm, spec).generate(ids, 3)
    assert seen["ar"] is None and seen["pld"] is None and seen["goose:harvest=off"] is None
    assert seen["goose"].shape[0] == len(ids) - 1  # the last prompt token is the first step's root
    assert seen["goose:harvest_window=3"].shape[0] == 3
    assert torch.allclose(seen["goose:harvest_window=3"], seen["goose"][-3:], atol=1e-5)
