"""A GGUF file's tensors under transformers' names, de-quantised one at a time.

This is transformers' own GGUF reading (``load_gguf_checkpoint``: the name map from a model of the file's config,
the per-architecture tensor processors that undo llama.cpp's layout, gguf-py's de-quantisation), taken tensor by
tensor instead of into one dictionary of the whole float32 model, so a conversion holds one tensor at a time.
Architectures transformers reads by another path (its packed-weight loader: qwen3.5, lfm2) and files whose names
do not cover the model are reported as not streamable; the caller then converts them whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import torch


ROWS_AT_ONCE = 4096


class NotStreamable(Exception):
    """The file cannot be read tensor by tensor here (one sentence why)."""


def meta_model(config, dtype: torch.dtype = torch.float32):
    """transformers' model of ``config`` with no storage behind its tensors (names, shapes and tying only)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=dtype)


def tied_heads(model) -> set[str]:
    """The state-dict names of an output embedding tied to the input embedding: stored once, under the input's."""
    out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
    if out_emb is None or in_emb is None or out_emb.weight is not in_emb.weight:
        return set()
    return {f"{name}.weight" for name, module in model.named_modules(remove_duplicate=False) if module is out_emb}


def streamed_tensors(gguf: Path, model) -> Iterator[tuple[str, torch.Tensor]]:
    """(transformers name, tensor) for each of the file's tensors, in the file's order; ``model`` (see
    ``meta_model``) gives the names. NotStreamable, at once, where the file's tensors do not map one to one onto
    the model's (tied heads aside)."""
    from gguf import GGUFReader
    from transformers.integrations.gguf.utils import is_gguf_arch_supported
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
        load_gguf_checkpoint,
        read_field,
    )

    reader = GGUFReader(str(gguf))
    architecture = read_field(reader, "general.architecture")[0]
    if is_gguf_arch_supported(architecture):
        raise NotStreamable(f"transformers reads {architecture} GGUF files by its packed-weight loader")
    parsed = load_gguf_checkpoint(str(gguf), return_tensors=False)
    processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=parsed["config"])
    if hasattr(processor, "_set_moe_expert_tensor"):
        raise NotStreamable(f"{architecture} experts are assembled from several tensors")
    mapping = get_gguf_hf_weights_map(model, processor)
    wanted = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    for head in tied_heads(model):
        wanted.pop(head, None)
    mapped = {mapping[t.name] for t in reader.tensors if t.name in mapping}
    if mapped != set(wanted):
        raise NotStreamable(f"the file's tensor names do not match {type(model).__name__}'s")
    return _dequantised(gguf, reader, processor, parsed, mapping, wanted)


def dequantised(tensor, rows: int = ROWS_AT_ONCE) -> np.ndarray:
    """The GGUF tensor's values in an array of their own, de-quantised ``rows`` rows at a time: gguf-py's
    de-quantisation makes several temporaries the size of what it is given, 4 GB for a 150k-row embedding."""
    from gguf import dequantize

    data = tensor.data
    if data.ndim < 2 or data.shape[0] <= rows:
        return np.array(dequantize(data, tensor.tensor_type))
    first = dequantize(data[:rows], tensor.tensor_type)
    out = np.empty((data.shape[0],) + first.shape[1:], dtype=first.dtype)
    out[:rows] = first
    for start in range(rows, data.shape[0], rows):
        out[start:start + rows] = dequantize(data[start:start + rows], tensor.tensor_type)
    return out


def _dequantised(gguf, reader, processor, parsed, mapping, wanted) -> Iterator[tuple[str, torch.Tensor]]:
    seen = set()
    for tensor in reader.tensors:
        result = processor.process(weights=dequantised(tensor), name=tensor.name,
                                   tensor_key_mapping=mapping, parsed_parameters=parsed)
        if result.name not in mapping:
            continue
        name = mapping[result.name]
        if name in seen or name not in wanted:
            continue
        weights = result.weights
        out = torch.from_numpy(np.ascontiguousarray(weights, dtype=np.float32 if weights.dtype.kind == "f" else None))
        if tuple(out.shape) != wanted[name]:
            raise ValueError(f"{gguf.name}: {name} has shape {tuple(out.shape)}, the model wants {wanted[name]}")
        seen.add(name)
        yield name, out
    if seen != set(wanted):
        raise ValueError(f"{gguf.name} lacks {sorted(set(wanted) - seen)[:3]}")
