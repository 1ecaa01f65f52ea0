"""drafting.engine.fast_topk: the fast per-row argmax and top-k give torch's answers, ties and odd vocabulary sizes included."""

import pytest
import torch

from drafting.engine.fast_topk import BLOCK, row_argmax, row_topk


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 3, 17])
def test_argmax_is_torchs_first_maximum_even_on_ties(dtype, rows):
    gen = torch.Generator().manual_seed(rows)
    few_values = torch.randint(0, 3, (rows, 5000), generator=gen).to(dtype)  # every row full of ties
    assert torch.equal(row_argmax(few_values), few_values.argmax(-1))
    two_peaks = torch.randn(rows, 5000, generator=gen).to(dtype)
    two_peaks[:, 4321] = two_peaks[:, 77] = 100
    assert (row_argmax(two_peaks) == 77).all()


@pytest.mark.parametrize("vocab", [49152, 49155, BLOCK * 40 + 1, 300])
@pytest.mark.parametrize("rows", [1, 5, 16])
def test_topk_equals_torch_topk(vocab, rows):
    gen = torch.Generator().manual_seed(vocab + rows)
    logits = torch.randn(rows, vocab, generator=gen) * 4
    values, indices = row_topk(logits, 10)
    want = torch.topk(logits, 10, dim=-1)
    assert torch.equal(values, want.values)
    assert torch.equal(indices, want.indices)


def test_topk_finds_winners_crowded_into_one_block_and_the_tail():
    logits = torch.zeros(2, BLOCK * 50 + 7)
    logits[0, 128:138] = torch.arange(10, 20, dtype=torch.float)  # all ten in one block
    logits[1, -3:] = torch.tensor([5.0, 6.0, 7.0])  # the best three in the tail no whole block holds
    values, indices = row_topk(logits, 10)
    assert indices[0].tolist() == list(range(137, 127, -1))
    assert indices[1, :3].tolist() == [logits.shape[1] - 1, logits.shape[1] - 2, logits.shape[1] - 3]
    assert torch.equal(values, torch.topk(logits, 10, dim=-1).values)
