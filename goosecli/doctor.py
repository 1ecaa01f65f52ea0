"""`goose doctor`: which precision and weight format is fastest for the model on this device, and why
`--dtype auto` picks what it picks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from .main import app
from .options import Device, Model, fail


@app.command()
def doctor(
    model: Model = None,
    device: Device = "auto",
    modes: Annotated[
        Optional[str],
        typer.Option("--modes", help="Comma-separated modes to measure, DTYPE[+WEIGHTS], e.g. 'float32,bfloat16,bfloat16+int8'; default: every mode this device offers."),
    ] = None,
    prefix: Annotated[int, typer.Option("--prefix", help="Tokens already in the KV cache when the forwards are timed (also the prefill length timed).", min=1)] = 256,
    max_rows: Annotated[int, typer.Option("--max-rows", help="Largest forward of the cost curve (powers of two from 1 up to this).", min=1, max=1024)] = 128,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed forwards per size (the median is kept), after one warm-up.", min=1, max=50)] = 3,
    json_out: Annotated[Optional[Path], typer.Option("--json", "-o", help="Write the raw numbers here as JSON.")] = None,
) -> None:
    """Time one-token steps, prefill and the verification cost curve (1..128 rows) for every dtype and weight
    format; say which is fastest and what `--dtype auto` picks."""
    import torch
    from rich.console import Console
    from rich.table import Table

    from drafting.model import ModelError, resolve_device
    from drafting.profile import auto_choice, fastest, parse_modes, profile_mode

    try:
        dev = resolve_device(device)
        mode_list = parse_modes(modes, dev)
    except ModelError as exc:
        fail(str(exc))
    if json_out is not None and json_out.is_dir():
        fail(f"--json {str(json_out)!r} is a folder; give a file name.")
    sizes = [1]
    while sizes[-1] * 2 <= max_rows:
        sizes.append(sizes[-1] * 2)
    if sizes[-1] != max_rows:
        sizes.append(max_rows)
    err = Console(stderr=True, highlight=False)
    out = Console(highlight=False)
    if not out.is_terminal:  # logs and pipes: do not squeeze the table into 80 columns
        out.width = max(out.width, 140)
    threads = torch.get_num_threads()
    profiles = []
    for m in mode_list:
        with err.status(f"goose doctor: measuring {m.label}"):
            p = profile_mode(model, device, m, sizes=sizes, prefix=prefix, repeats=repeats)
        profiles.append(p)
    if all(p.error for p in profiles):
        fail(profiles[0].error)  # the model does not load at all (bad path, missing file): one sentence
    table = Table(title=f"forward time by mode on {dev.type}, {threads} threads ({prefix} tokens cached; ms, median of {repeats})")
    table.add_column("mode")
    for col in ("tokens/s (1 row)", "prefill tok/s", *(str(n) for n in sizes), f"{sizes[-1]} / 1"):
        table.add_column(col, justify="right")
    for p in profiles:
        if p.error:
            table.add_row(p.mode, f"[red]{p.error}[/red]", *[""] * (len(sizes) + 2))
            continue
        table.add_row(
            p.mode, f"{1 / p.step_s:.1f}", f"{p.prefill_tokens_per_s:.0f}",
            *(f"{1000 * s:.1f}" for s in p.seconds), f"{p.seconds[-1] / p.seconds[0]:.1f}x",
        )
    out.print(table)
    best = fastest(profiles)
    auto_dt, why = auto_choice(device)
    if best is not None:
        out.print(f"fastest one-token step here: {best.mode} ({1000 * best.step_s:.1f} ms); "
                  f"use it with {_flags(best)}.")
    out.print(f"--dtype auto picks {auto_dt}: {why}")
    if json_out is not None:
        doc = {
            "device": dev.type,
            "threads": threads,
            "prefix": prefix,
            "repeats": repeats,
            "sizes": sizes,
            "auto": {"dtype": auto_dt, "reason": why},
            "fastest": best.mode if best else None,
            "modes": [p.to_dict() for p in profiles],
        }
        try:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        except OSError as exc:
            fail(f"Cannot write {str(json_out)!r}: {exc.strerror or exc}.")
        err.print(f"[dim]raw numbers: {json_out}[/dim]")


def _flags(p) -> str:
    return f"--dtype {p.dtype} --weights {p.weights}"
