"""A draft as transformers' verifier takes it: token ids, positions and the additive 4-D tree mask, honouring each
layer's attention window."""

from __future__ import annotations

import numpy as np
import torch

from drafting.engine.hf.pinned import Staging, thread_staging
from drafting.engine.tree import Draft


def step_inputs(draft: Draft, prefix_len: int, dtype: torch.dtype, device, layout=None,
                staging: Staging | None = None):
    """Token ids (1, n), position ids (1, n) and the additive 4-D mask (1, 1, n, prefix_len + n).

    ``layout`` (drafting.engine.hf.model_support.AttentionLayout) names the windowed layer types: each then gets its own mask,
    handed over as a dict keyed by layer type when the model mixes types. The mask is None when a plain causal
    mask is right (a single chain with no rows): the model then builds its own, windows included, and attention
    can take its fast path. Only the n x n block of step rows comes from the host, in one copy through
    ``staging`` (default: this thread's pinned buffers); the rest is made on ``device``.
    """
    staging = staging or thread_staging()
    tree, rows = draft.tree, draft.rows
    t = len(tree)
    tokens = list(tree.tokens)
    positions = [prefix_len + d for d in tree.depths]
    is_chain = all(p == i - 1 for i, p in enumerate(tree.parents))
    if rows:
        tokens += rows.tokens
        positions += [prefix_len + o for o in rows.offsets]
    n = len(tokens)
    on_host = staging.direct(device)  # the CPU: no copy to make
    if is_chain and not rows:
        if on_host:
            return torch.tensor([tokens], dtype=torch.long), torch.tensor([positions], dtype=torch.long), None
        packed = staging.to_device(tokens + positions, device)
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
        packed = staging.to_device(np.concatenate([np.array([tokens, positions]).reshape(-1), vis.reshape(-1)]),
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
