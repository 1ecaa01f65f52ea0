"""transformers' own greedy (or sampled) ``generate()``, ``hf-ar``: the plain decoding users already have, on the
model exactly as transformers loads it, run on the same prompt ids with the same stop rules as our decoders.

"Exactly as transformers loads it" means a second model instance, built from the same folder's config (for a
GGUF, the converted folder), in the same dtype and device, with none of goose's changes: no packed or int8
weights, no grouped tree attention. Where goose's model still holds the plain weights (``float``, and the formats
that keep them beside a packed copy: ``dual``, ``mkl``), the instance is built on those very tensors, so a plain
baseline costs no second copy of the model; otherwise (``onednn``, ``int8``) it loads its own from the folder,
refused in one sentence when that copy would not fit in the memory free. One instance per model is shared by
``hf-ar`` and ``hf-pld``. Not registry speculators (they drive their own loop); benchmarks know them by name.
"""

from __future__ import annotations

import time
import weakref
from itertools import chain
from pathlib import Path

import torch

from drafting.engine.stop_rules import check_fits, cut_at_eos
from drafting.engine.decode import GenerationResult
from drafting.models.footprint import check_room
from drafting.models.gguf_convert import converted_folder
from drafting.models.gguf_stream import meta_model
from drafting.engine.loaded_model import LoadedModel
from drafting.models.loader import _quiet_transformers
from drafting.engine.sampling_params import SamplingParams
from drafting.weights.formats import WEIGHT_FORMATS

NAME = "hf-ar"
_PLAIN: dict[tuple, torch.nn.Module] = {}  # own copies, by model name, dtype and device
_SHARING: "weakref.WeakKeyDictionary[torch.nn.Module, torch.nn.Module]" = weakref.WeakKeyDictionary()


def plain_source(lm: LoadedModel) -> str:
    """Where transformers loads ``lm`` from: its folder, its GGUF's converted folder, or its hub id."""
    if lm.gguf is not None:  # the embedded model, a built-in name or a .gguf file
        return str(converted_folder(lm.gguf))
    path = Path(lm.name).expanduser()
    return str(path) if path.exists() else lm.name


def plain_model(lm: LoadedModel) -> torch.nn.Module:
    """The unmodified transformers model of ``lm``: on ``lm``'s own weight tensors where it keeps them plain, else
    a copy loaded once per model, dtype and device."""
    key = (lm.name, str(lm.dtype), str(lm.device))
    if lm.model in _SHARING:
        return _SHARING[lm.model]
    if key in _PLAIN:
        return _PLAIN[key]
    empty = _empty_plain_model(lm)
    if empty is not None and _give_tensors(empty, lm.model):
        _SHARING[lm.model] = empty.eval()
        return empty
    if empty is not None:
        _check_room_for_a_copy(lm, empty)
    from transformers import AutoModelForCausalLM

    net = AutoModelForCausalLM.from_pretrained(plain_source(lm), dtype=lm.dtype)
    _PLAIN[key] = net.to(lm.device).eval()
    return _PLAIN[key]


def _empty_plain_model(lm: LoadedModel) -> torch.nn.Module | None:
    """transformers' model of ``lm``'s folder config with no storage behind its tensors (the meta device); None
    where there is no config to read (a hub id this machine cannot reach)."""
    from transformers import AutoConfig, GenerationConfig

    _quiet_transformers()
    source = plain_source(lm)
    try:
        net = meta_model(AutoConfig.from_pretrained(source), lm.dtype)
    except (OSError, ValueError):
        return None
    try:  # what from_pretrained would read beside the weights
        net.generation_config = GenerationConfig.from_pretrained(source)
    except (OSError, ValueError):
        pass
    return net


def _give_tensors(empty: torch.nn.Module, ours: torch.nn.Module) -> bool:
    """Put ``ours``'s own tensors in place of every parameter and buffer of ``empty``; False (nothing changed)
    when ``ours`` lacks one as a plain tensor of that shape and dtype (a packed or int8 layer)."""
    found = []
    for is_parameter, named in ((True, empty.named_parameters()), (False, empty.named_buffers())):
        for name, want in named:
            owner, _, attr = name.rpartition(".")
            try:
                held = getattr(ours.get_submodule(owner), attr, None)
            except AttributeError:
                return False
            if not isinstance(held, torch.Tensor) or held.shape != want.shape or held.dtype != want.dtype:
                return False
            if is_parameter and not isinstance(held, torch.nn.Parameter):  # a stand-in's buffer
                held = torch.nn.Parameter(held, requires_grad=False)
            found.append((empty.get_submodule(owner), "_parameters" if is_parameter else "_buffers", attr, held))
    for module, slots, attr, held in found:
        getattr(module, slots)[attr] = held
    empty.tie_weights()
    return not any(t.is_meta for t in chain(empty.parameters(), empty.buffers()))


def _check_room_for_a_copy(lm: LoadedModel, empty: torch.nn.Module) -> None:
    weights = sum(t.numel() for t in chain(empty.parameters(), empty.buffers()))
    check_room(f"transformers' own copy of {lm.name} for hf-ar / hf-pld", weights, lm.dtype,
               instead=f"goose's --weights {lm.weights} keeps no plain weights to share, so use --weights float or "
                       "leave the hf-* baselines out")


def same_network(lm: LoadedModel) -> bool:
    """Whether the unmodified model computes what ``lm`` computes (up to float rounding): not with a weight format
    of other weights (int8)."""
    fmt = WEIGHT_FORMATS.get(lm.weights)
    return fmt is None or fmt.same_numbers


def run_generate(model: torch.nn.Module, lm: LoadedModel, params: SamplingParams, prompt_ids: list[int],
                 max_new_tokens: int, **extra) -> GenerationResult:
    """``model.generate`` on ``prompt_ids`` with our token limit, context check and EOS rule."""
    check_fits(prompt_ids, lm.max_context)
    room = lm.max_context - len(prompt_ids)
    eos = sorted(lm.eos_ids)
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=lm.device)
    kwargs = dict(
        max_new_tokens=min(max_new_tokens, room),
        eos_token_id=eos or None,
        pad_token_id=eos[0] if eos else 0,
        attention_mask=torch.ones_like(ids),
        **extra,
    )
    if params.greedy:
        kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
    else:
        if params.seed is not None:
            torch.manual_seed(params.seed)
        kwargs.update(do_sample=True, temperature=params.temperature, top_k=params.top_k or None, top_p=params.top_p)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, **kwargs)
    wall = time.perf_counter() - t0
    new = [int(t) for t in out[0, len(prompt_ids):].tolist()]
    new, ended = cut_at_eos(new, lm.eos_ids)
    stop = "eos" if ended else "context" if len(new) < max_new_tokens else "max_new_tokens"
    return GenerationResult(prompt_ids=list(prompt_ids), output_ids=new, stop_reason=stop, wall_s=wall)


class HFGenerate:
    """Plain decoding with ``generate()`` on the unmodified model; greedy unless sampling is asked for."""

    name = NAME
    external = False

    def __init__(self, lm: LoadedModel, params: SamplingParams | None = None):
        self.lm = lm
        self.params = params or SamplingParams()
        self.model = plain_model(lm)
        self.same_network = same_network(lm)

    def spec(self) -> str:
        return self.name

    def stats(self) -> dict:
        return {}

    def generate_options(self) -> dict:
        """Extra keyword arguments for ``generate()`` (none: plain decoding)."""
        return {}

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> GenerationResult:
        return run_generate(self.model, self.lm, self.params, prompt_ids, max_new_tokens, **self.generate_options())
