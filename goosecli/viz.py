"""`goose viz`: open recorded traces (or record one on the spot) and step through their trees."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated, Optional

import typer

from goosecli.app import app
from goosecli.options import (
    ROW_SPECULATORS,
    Engine,
    TREE_SPECULATORS,
    Device,
    DeviceMap,
    Dtype,
    MaxNewTokens,
    Model,
    Raw,
    Seed,
    RegistryHelp,
    Temperature,
    TopK,
    TopP,
    Weights,
    fail,
    load_or_fail,
    sampling_or_fail,
    speculator_or_fail,
)

MAX_SIBLINGS = 500  # headers read when looking for a trace's partner in its folder


@app.command(cls=RegistryHelp)
def viz(
    traces: Annotated[Optional[list[Path]], typer.Argument(help="Trace files from `goose bench --trace DIR`, `goose chat --trace FILE` or vLLM with GooseProposer (trace=DIR); a goose and a ptd trace of one prompt open side by side.", show_default=False)] = None,
    prompt: Annotated[Optional[str], typer.Option("--prompt", "-p", help="Record a trace of this prompt now and open it.")] = None,
    speculators: Annotated[str, typer.Option("--speculators", "-s", help="With --prompt: the speculators to record, comma-separated; the first tree one (" + TREE_SPECULATORS + ") and the first draft-row one (" + ROW_SPECULATORS + ") are shown.")] = "goose,ptd",
    save: Annotated[Optional[Path], typer.Option("--save", help="With --prompt: folder to keep the recorded traces in (default: a temporary folder).")] = None,
    model: Model = None,
    device: Device = "auto",
    engine: Engine = "transformers",
    dtype: Dtype = "auto",
    weights: Weights = "auto",
    device_map: DeviceMap = None,
    raw: Raw = False,
    max_new_tokens: MaxNewTokens = 64,
    temperature: Temperature = 0.0,
    top_k: TopK = 0,
    top_p: TopP = 1.0,
    seed: Seed = None,
) -> None:
    """Step through speculation trees: the GOOSE spine tree beside the PTD draft tree, at the same output position."""
    from drafting.engine.trace import TraceError, read_trace

    if prompt is not None and traces:
        fail("Give trace files or --prompt, not both.")
    if prompt is None and not traces:
        fail("Give a trace file to open, or --prompt '…' to record one now.")
    params = sampling_or_fail(temperature, top_k, top_p, seed)
    paths = list(traces or [])
    if prompt is not None:
        paths = record(prompt, speculators, save, model, device, dtype, device_map, raw, max_new_tokens, params, weights,
                       engine)
    elif len(paths) == 1:
        paths += partner(paths[0])

    from tui.viz_app import Opened, VizApp

    opened = []
    for p in paths:
        try:
            opened.append(Opened(p.name, read_trace(p)))
        except TraceError as exc:
            fail(str(exc))
    VizApp(opened).run()
    if prompt is not None:
        typer.echo(f"Traces kept in {paths[0].parent}", err=True)


def partner(path: Path) -> list[Path]:
    """The trace of the same prompt by a speculator of the other kind (tree vs PTD rows), from the same folder."""
    from tui.viz_app import row_speculators

    head = _header(path)
    if not head or "prompt_id" not in head or not path.parent.is_dir():
        return []
    rows = row_speculators()
    mine = str(head.get("speculator", "")).split(":")[0] in rows
    for other in sorted(path.parent.glob("*.jsonl"))[:MAX_SIBLINGS]:
        h = _header(other)
        if other != path and h and h.get("prompt_id") == head["prompt_id"]:
            if (str(h.get("speculator", "")).split(":")[0] in rows) != mine:
                return [other]
    return []


def _header(path: Path) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            head = json.loads(f.readline())
        return head if isinstance(head, dict) and "goose_trace" in head else None
    except (OSError, ValueError):
        return None


def record(prompt, speculators, save, model, device, dtype, device_map, raw, max_new_tokens, params=None, weights="auto",
           engine="transformers") -> list[Path]:
    """Decode the prompt once per speculator, recording each step with the target's top-5, into trace files."""
    from dataclasses import asdict

    from rich.console import Console

    from drafting.errors import ContextError
    from drafting.engine.decode import Decoder
    from drafting.machine.step_hooks import machine_hooks
    from drafting.models.chat_template import encode
    from drafting.engine.acceptance import make_acceptor
    from drafting.engine.sampling_params import SamplingParams
    from drafting.engine.trace import TraceWriter

    specs = [s.strip() for s in speculators.split(",") if s.strip()]
    if not specs:
        fail("--speculators needs at least one speculator name.")
    made = [speculator_or_fail(s) for s in specs]
    lm = load_or_fail(model, device, dtype, device_map, weights, engine)
    folder = save or Path(tempfile.mkdtemp(prefix="goose-viz-"))
    ids = encode(lm.tokenizer, [{"role": "user", "content": prompt}], raw=raw)
    console = Console(stderr=True)
    paths = []
    for spec in made:
        name = spec.spec()
        path = folder / f"prompt__{name.replace(':', '_').replace(',', '_')}.jsonl"
        params = params or SamplingParams()
        header = {"speculator": name, "model": lm.name, "prompt_id": "prompt", "prompt": prompt, "command": "viz",
                  "engine": lm.engine, "mode": lm.engine_mode, "sampling": asdict(params)}
        try:
            decoder = Decoder(lm, spec, acceptor=make_acceptor(params), record_top=5, hooks=machine_hooks())
            with console.status(f"recording {name} …"), TraceWriter(path, header, tokenizer=lm.tokenizer) as tw:
                for rec in decoder.run(ids, max_new_tokens):
                    tw.write(rec)
        except (ContextError, ValueError) as exc:
            fail(str(exc))
        paths.append(path)
    return paths
