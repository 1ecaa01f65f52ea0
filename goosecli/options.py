"""Options shared by every command (model, device, sampling), the help text that lists the registered speculators
and weight formats, and the one way errors reach the user."""

from __future__ import annotations

import sys
from typing import Annotated, NoReturn, Optional

import typer
from rich.markup import escape
from typer.core import TyperCommand

Model = Annotated[
    Optional[str],
    typer.Option("--model", "-m", help="Model: omitted = embedded SmolLM2-135M-Instruct; gemma3-270m or qwen2.5-coder-1.5b (their packages installed); a .gguf file, a local folder or a hub id."),
]
Device = Annotated[str, typer.Option("--device", help="auto (CUDA when present), cpu or cuda.")]
Engine = Annotated[
    str,
    typer.Option("--engine", "-e", envvar="GOOSE_ENGINE", help="What runs the model: transformers (torch; float32 outputs exactly plain decoding's) or llama.cpp (the GGUF's own weights and kernels, needs `make llamacpp-setup`; outputs identical up to near-ties)."),
]
Dtype = Annotated[str, typer.Option("--dtype", help="auto (fp32 on CPU, bf16 on CUDA), float32, bfloat16 or float16.")]
Weights = Annotated[
    str,
    typer.Option("--weights", help="{weight_formats}"),  # filled in by RegistryHelp from drafting.weights
]
DeviceMap = Annotated[
    Optional[str], typer.Option("--device-map", help="'auto' spreads a model too big for one GPU over several (accelerate).")
]
Raw = Annotated[bool, typer.Option("--raw", help="Feed prompts as raw text instead of through the chat template.")]
MaxNewTokens = Annotated[int, typer.Option("--max-new-tokens", "-n", help="Most new tokens per answer.", min=1)]
# No min= on the temperature: click's range words a NaN as "should be greater than or equal to 0" in a usage box;
# SamplingParams.check gives every bad value (negative, NaN, inf, too small to divide by) one sentence.
Temperature = Annotated[float, typer.Option("--temperature", "-t", help="0 = greedy; > 0 samples (lossless; at least 1e-06).")]
TopK = Annotated[int, typer.Option("--top-k", help="Sample only among the k most likely tokens (0 = off).", min=0)]
TopP = Annotated[float, typer.Option("--top-p", help="Sample from the smallest set with this much probability (1 = off).")]
Seed = Annotated[Optional[int], typer.Option("--seed", help="Random seed for sampling (reproducible runs), 0 to 2**64 - 1.")]


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one clear sentence to stderr and exit non-zero."""
    print(f"goose: {message}", file=sys.stderr)
    raise typer.Exit(code)


def load_or_fail(model: str | None, device: str, dtype: str, device_map: str | None, weights: str = "auto",
                 engine: str = "transformers"):
    from drafting.errors import ModelError
    from drafting.models.loader import load_model

    try:
        return load_model(model, device=device, dtype=dtype, device_map=device_map, weights=weights, engine=engine)
    except ModelError as exc:
        fail(str(exc))


def sampling_or_fail(temperature: float, top_k: int, top_p: float, seed: int | None):
    from drafting.engine.sampling_params import SamplingParams

    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    try:
        params.check()
    except ValueError as exc:
        fail(str(exc))
    return params


def speculator_or_fail(spec: str):
    from drafting.errors import SpecError
    from drafting.speculators import create

    try:
        return create(spec)
    except SpecError as exc:
        fail(str(exc))


# Placeholders in an option's help, filled in from the registries when the help is shown.
SPECULATORS = "{speculators}"
TREE_SPECULATORS = "{tree_speculators}"
ROW_SPECULATORS = "{row_speculators}"
WEIGHT_FORMATS = "{weight_formats}"


class RegistryHelp(TyperCommand):
    """A command whose help names the registered speculators and weight formats (at the placeholders above) and
    lists each speculator's options below its own. Made only when the help is shown: the registries import
    torch, which running a command need not wait for before it parses its arguments."""

    def format_help(self, ctx, formatter) -> None:
        from drafting.errors import SpecError
        from drafting.speculators import registry
        from drafting.weights.formats import weights_help

        try:
            reg = registry()
        except SpecError as exc:
            fail(str(exc))
        names = {
            SPECULATORS: ", ".join(reg),
            TREE_SPECULATORS: ", ".join(n for n, c in reg.items() if not c.draws_rows),
            ROW_SPECULATORS: ", ".join(n for n, c in reg.items() if c.draws_rows),
            WEIGHT_FORMATS: weights_help(),
        }
        for param in self.params:
            for mark, text in names.items():
                if param.help and mark in param.help:
                    param.help = param.help.replace(mark, text)
        self.epilog = speculator_catalogue(reg)
        super().format_help(ctx, formatter)


def speculator_catalogue(reg: dict) -> str:
    """Every speculator with its summary and its options (key=default and help), a paragraph each."""
    parts = ["Speculators, set as NAME or NAME:KEY=VALUE,KEY=VALUE (switches take on or off):"]
    for name, cls in reg.items():
        lines = [f"{name}: {cls.summary_line}" if cls.summary_line else name]
        for key, opt in cls.options.items():
            default = opt.format(opt.default) or '""'  # an empty text (cache: none)
            lines.append(f"  {key}={default}  {opt.help}")
        parts.append("\n".join(lines))
    return escape("\n\n".join(parts))
