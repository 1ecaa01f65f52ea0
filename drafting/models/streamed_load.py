"""Load a converted GGUF folder (drafting.models.gguf_convert) tensor by tensor, so the peak is the model itself.

transformers' ``from_pretrained`` maps the weight files while it copies them out (on a bfloat16 folder of the
1.5B model that put 10.7 GB resident for a 7.1 GB float32 model: the map's pages count too). Here the model is
built with its storage unwritten (``no_init_weights``: nothing is drawn at random), each stored tensor is read
into memory of its own and copied into place, one at a time. Only folders goose wrote itself take this path:
their names are the model's own state-dict names, with no key renames or fused experts for a loader to apply.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import torch

from drafting.models.safetensors_stream import read_tensors, tensor_files


def load_streamed(folder: Path, dtype: torch.dtype, device: torch.device | None = None) -> torch.nn.Module:
    """transformers' model of ``folder``'s config in ``dtype`` with every stored tensor copied in; ValueError
    (one sentence) when a stored tensor does not fit the model or the files leave one of its tensors unset.
    ``device``: where the model is built and each tensor copied to (a GPU: the weights never sit whole on the
    host); None: the CPU."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig
    from transformers.initialization import no_init_weights

    config = AutoConfig.from_pretrained(str(folder))
    with no_init_weights(), (torch.device(device) if device is not None else nullcontext()):
        net = AutoModelForCausalLM.from_config(config, dtype=dtype)
    net.tie_weights()  # from_pretrained ties after loading; here the tied tensors must be one before
    targets = net.state_dict()  # tied tensors appear under each of their names, one storage
    filled: set[int] = set()
    with torch.no_grad():
        for path in tensor_files(folder):
            for name, stored in read_tensors(path):
                target = targets.get(name)
                if target is None or target.shape != stored.shape:
                    raise ValueError(f"{folder.name} stores {name} {tuple(stored.shape)}, which the model "
                                     f"{'lacks' if target is None else 'has as ' + str(tuple(target.shape))}")
                target.copy_(stored)
                filled.add(target.data_ptr())
                del stored
    unset = [name for name, t in targets.items() if t.data_ptr() not in filled]
    if unset:
        raise ValueError(f"{folder.name} holds no value for {unset[0]} ({len(unset)} tensors unset)")
    net.config.name_or_path = str(folder)
    if (folder / "generation_config.json").is_file():
        net.generation_config = GenerationConfig.from_pretrained(str(folder))
    return net
