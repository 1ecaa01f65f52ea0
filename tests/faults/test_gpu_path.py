"""The device handling of the GPU path, checked on CPU: step inputs land on the model's device whatever it is,
devices goose was never checked on are refused at load, the KV buffer never grows past the model's context and
static shapes do not preallocate a whole 128k window by default.

The ``meta`` device stands in for an accelerator that is not CUDA (``mps``, ``xpu``): tensors can be placed on
it on any machine, and a tensor left on the CPU is told apart from one moved there."""

from __future__ import annotations

import pytest
import torch
import transformers as T

from drafting.engine.hf.kv_cache import BufferedLayer, new_cache
from drafting.engine.hf.pinned import Staging
from drafting.engine.hf.static_shapes import DEFAULT_CONTEXT, StaticForward, StaticShapes
from drafting.engine.tree import Draft, DraftRows, DraftTree
from drafting.engine.hf.step_inputs import step_inputs
from drafting.errors import ModelError
from drafting.models.loader import resolve_device
from support.cli import run_goose

ELSEWHERE = torch.device("meta")


def test_staging_copies_to_a_device_that_is_not_cuda():
    out = Staging().to_device([[3, 1], [4, 1]], ELSEWHERE)
    assert out.device == ELSEWHERE and out.dtype == torch.long and out.shape == (4,)
    assert Staging().to_device([3, 1, 4], "cpu").tolist() == [3, 1, 4]


def test_step_inputs_land_on_a_device_that_is_not_cuda():
    tree = DraftTree(5)
    tree.add(6, 0, "context")
    tree.add(7, 0, "adjacency")
    chain = DraftTree(5)
    chain.add(6, 0, "context")
    rows = DraftRows(tokens=[9], offsets=[1], visible=[[0]])
    for draft in (Draft(tree=tree), Draft(tree=chain), Draft(tree=tree, rows=rows)):
        ids, pos, mask = step_inputs(draft, 4, torch.float32, ELSEWHERE)
        assert ids.device == ELSEWHERE and pos.device == ELSEWHERE
        assert mask is None or mask.device == ELSEWHERE


@pytest.mark.parametrize("device", ["mps", "xpu", "xpu:0"])
def test_devices_goose_was_not_checked_on_are_refused_at_load(device):
    with pytest.raises(ModelError, match=f"cpu or cuda only, not {device.split(':')[0]}") as err:
        resolve_device(device)
    message = str(err.value)
    assert message.count(". ") == 0 and message.endswith(".") and "\n" not in message


def test_goose_refuses_mps_at_load_in_one_line(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "p1", "task": "code", "prompt": "Add two numbers."}\n')
    proc = run_goose("bench", str(prompts), "--device", "mps", timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert "cpu or cuda only, not mps" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_a_gpu_is_refused_for_every_index(device):
    with pytest.raises(ModelError, match="no CUDA GPU is available"):
        resolve_device(device)


def _layer_fed(limit, lengths) -> list[int]:
    """The buffer capacity after each of ``lengths`` (new rows per update, 2 KV heads of 4 dims)."""
    layer = BufferedLayer(limit)
    seen = []
    for m in lengths:
        layer.update(torch.zeros(1, 2, m, 4), torch.zeros(1, 2, m, 4))
        seen.append(layer._capacity())
    return seen


def test_kv_buffer_never_grows_past_the_context_length():
    # one token at a time up to the context, as plain decoding fills it, and tree-sized steps crossing a doubling
    assert max(_layer_fed(1500, [1] * 1500)) == 1500
    assert max(_layer_fed(3000, [900, 200, 200, 1600])) == 3000
    assert _layer_fed(100, [60, 40]) == [100, 100]  # smaller than the first allocation: never more than the context
    assert _layer_fed(None, [1, 1100]) == [1024, 2048]  # no stated context: doubling as before


def test_kv_buffer_past_the_context_still_takes_every_row():
    """A caller that runs past the model's context (a cost measurement) gets its rows, then doubling again."""
    assert _layer_fed(1000, [1000, 24, 1]) == [1000, 2000, 2000]


def test_new_cache_takes_the_limit_from_the_config():
    config = T.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=700)
    net = T.LlamaForCausalLM(config).eval()
    cache = new_cache(config)
    assert [layer.limit for layer in cache.layers] == [700, 700]
    with torch.inference_mode():
        for _ in range(2):  # 600 tokens cached: the first allocation would be 1,024 without the limit
            net(input_ids=torch.arange(2, 302)[None] % 64, cache=cache, use_cache=True)
    assert cache.get_seq_length() == 600 and all(layer._capacity() == 700 for layer in cache.layers)
    gpt2 = T.GPT2Config(n_positions=300, n_embd=16, n_layer=1, n_head=2, vocab_size=64)
    assert [layer.limit for layer in new_cache(gpt2).layers] == [300]  # configs that name it otherwise


def test_static_shapes_do_not_preallocate_a_long_window_by_default(tiny_lm):
    long_window = 131072
    shapes = StaticShapes(buckets=(1, 4))
    fwd = StaticForward(tiny_lm.model, tiny_lm.dtype, tiny_lm.device, long_window, shapes)
    assert fwd.context == DEFAULT_CONTEXT < long_window and fwd.capacity == DEFAULT_CONTEXT + 4
    cache = fwd.new_cache()
    fwd.prefill([5, 6, 7], cache)
    assert all(layer.keys.shape[2] == DEFAULT_CONTEXT + 4 for layer in cache.layers)
    asked = StaticForward(tiny_lm.model, tiny_lm.dtype, tiny_lm.device, long_window,
                          StaticShapes(buckets=(1, 4), context=2 * DEFAULT_CONTEXT))
    assert asked.context == 2 * DEFAULT_CONTEXT  # a longer context is there when asked for by name
    short = StaticForward(tiny_lm.model, tiny_lm.dtype, tiny_lm.device, 512, shapes)
    assert short.context == 512  # never more than the model's window
