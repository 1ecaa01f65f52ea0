"""`goose doctor`: which precision and weight format is fastest for the model on this device, and why
`--dtype auto` picks what it picks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from goosecli.app import app
from goosecli.options import Device, Engine, Model, fail


@app.command()
def doctor(
    model: Model = None,
    device: Device = "auto",
    engine: Engine = "transformers",
    modes: Annotated[
        Optional[str],
        typer.Option("--modes", help="Comma-separated modes to measure, DTYPE[+WEIGHTS], e.g. 'float32,bfloat16,bfloat16+int8'; on --engine llama.cpp: auto (the GGUF's own weights) and q8_0 (a Q8_0 copy of them); default: every mode this device offers."),
    ] = None,
    prefix: Annotated[int, typer.Option("--prefix", help="Tokens already in the KV cache when the forwards are timed (also the prefill length timed).", min=1)] = 256,
    max_rows: Annotated[
        Optional[int],
        typer.Option("--max-rows", help="Time the cost curve's sizes (close up to 32 rows, then 48, 64, 128) up to this, and this; 128 also refreshes the cached curve; default: only 1, 4 and 16 rows, to keep the run short.", min=1, max=1024),
    ] = None,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed forwards per size (the median is kept), after one warm-up.", min=1, max=50)] = 3,
    even_if_busy: Annotated[bool, typer.Option("--even-if-busy", help="Measure every mode and print the figures even when other processes keep the machine busy (they are then not this machine's speed).")] = False,
    json_out: Annotated[Optional[Path], typer.Option("--json", "-o", help="Write the raw numbers here as JSON.")] = None,
) -> None:
    """Time one-token steps, prefill and verification forwards (1, 4 and 16 rows by default; --max-rows for the
    full curve) for every dtype and weight format; say which is fastest and what `--dtype auto` and
    `--weights auto` pick. A mode far slower than the fastest is timed once only; a busy machine is reported
    instead of timed."""
    import torch
    from rich.console import Console
    from rich.table import Table

    from drafting.machine.cost_curve import DEFAULT_SIZES
    from drafting.errors import ModelError
    from drafting.engine.llama.offload import llama_device
    from drafting.models.loader import resolve_device
    from drafting.weights.probe import write_cached
    from drafting.machine.doctor import (
        QUICK_SIZES, auto_choice, engine_modes, fastest, format_choices, parse_modes, profile_modes,
    )

    from functools import partial

    from drafting.machine.doctor import Mode
    from drafting.engine.forward import ENGINES, TRANSFORMERS
    from drafting.models.loader import load_model

    if engine not in ENGINES:
        fail(f"Unknown engine {engine!r}; use {' or '.join(ENGINES)}.")
    other_engine = engine != TRANSFORMERS
    try:
        dev = llama_device(device) if other_engine else resolve_device(device)  # llama.cpp: where it offloads to
        mode_list = engine_modes(modes, engine) if other_engine else parse_modes(modes, dev)
    except ModelError as exc:
        fail(str(exc))
    if json_out is not None and json_out.is_dir():
        fail(f"--json {str(json_out)!r} is a folder; give a file name.")
    sizes = list(QUICK_SIZES)
    if max_rows is not None:
        sizes = [n for n in DEFAULT_SIZES if n <= max_rows]
        if sizes[-1] != max_rows:
            sizes.append(max_rows)
    err = Console(stderr=True, highlight=False)
    out = Console(highlight=False)
    if not out.is_terminal:  # logs and pipes: do not squeeze the table into 80 columns
        out.width = max(out.width, 140)
    threads = torch.get_num_threads()
    with err.status("goose doctor: calibrating") as status:
        profiles, busy = profile_modes(
            model, device, mode_list, sizes=sizes, prefix=prefix, repeats=repeats, stop_when_busy=not even_if_busy,
            on_mode=lambda m: status.update(f"goose doctor: measuring {m.label}"), loader=partial(load_model, engine=engine),
        )
    if all(p.error for p in profiles) or (other_engine and profiles[0].error):  # the model itself does not load
        fail(profiles[0].error)  # the model does not load at all (bad path, missing file): one sentence
    if busy and not even_if_busy:
        fail(f"The machine is busy ({busy}), so its timings would be far from this machine's speed; run goose "
             f"doctor again when it is idle, or pass --even-if-busy.", code=3)
    title = f"forward time by mode on {f'{engine} ({dev.type})' if other_engine else dev.type}, {threads} threads ({prefix} tokens cached; ms, median of {repeats})"
    table = Table(title=title + (" — MACHINE BUSY, figures not trustworthy" if busy else ""))
    table.add_column("mode")
    for col in ("tokens/s (1 row)", "prefill tok/s", *(str(n) for n in sizes), f"{sizes[-1]} / 1"):
        table.add_column(col, justify="right")
    for p in profiles:
        if p.error or p.gave_up:
            cells = [f"{1 / p.step_s:.1f}", "", f"{1000 * p.step_s:.1f}"] if p.gave_up else []
            note = f"[red]{p.error}[/red]" if p.error else f"[yellow]{p.gave_up}[/yellow]"
            cells += [note]
            table.add_row(p.mode, *cells, *[""] * (len(sizes) + 3 - len(cells)))
            continue
        table.add_row(
            p.mode, f"{1 / p.step_s:.1f}", f"{p.prefill_tokens_per_s:.0f}",
            *(f"{1000 * s:.1f}" for s in p.seconds), f"{p.seconds[-1] / p.seconds[0]:.1f}x",
        )
    out.print(table)
    best = fastest(profiles)
    if other_engine:
        if best is not None:
            out.print(f"fastest one-token step: {best.mode}, {1000 * best.step_s:.1f} ms; a {sizes[-1]}-row pass costs "
                      f"{best.seconds[-1] / best.seconds[0]:.1f}x one (what its tree budgets read).")
        own = profiles[0]
        for p in profiles[1:]:
            if p.error is None and p.seconds and own.seconds and p.prefill_tokens_per_s:
                out.print(f"--weights {p.weights} against the file's own: one-token steps "
                          f"{own.step_s / p.step_s:.2f}x as fast, {sizes[-1]}-row passes "
                          f"{own.seconds[-1] / p.seconds[-1]:.2f}x, prefill {p.prefill_tokens_per_s / own.prefill_tokens_per_s:.2f}x.")
        _write_json(json_out, {"engine": engine, "device": dev.type, "threads": threads, "prefix": prefix, "repeats": repeats,
                               "sizes": sizes, "busy": busy, "modes": [p.to_dict() for p in profiles]}, err)
        return
    auto_dt, why = auto_choice(device)
    if best is not None:
        out.print(f"fastest one-token step here: {best.mode} ({1000 * best.step_s:.1f} ms); "
                  f"use it with {_flags(best)}.")
    out.print(f"--dtype auto picks {auto_dt}: {why}")
    choices = format_choices(profiles)
    for fp, choice in choices:
        if fp is not None and not busy:
            write_cached(fp, choice)  # later runs with --weights auto use exactly this table's choice
        out.print(choice.describe())
    _write_json(json_out, {
        "device": dev.type,
        "threads": threads,
        "prefix": prefix,
        "repeats": repeats,
        "sizes": sizes,
        "busy": busy,
        "auto": {"dtype": auto_dt, "reason": why},
        "weights_auto": [c.to_dict() for _, c in choices],
        "fastest": best.mode if best else None,
        "modes": [p.to_dict() for p in profiles],
    }, err)


def _write_json(json_out: Path | None, doc: dict, err) -> None:
    if json_out is None:
        return
    try:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    except OSError as exc:
        fail(f"Cannot write {str(json_out)!r}: {exc.strerror or exc}.")
    err.print(f"[dim]raw numbers: {json_out}[/dim]")


def _flags(p) -> str:
    return f"--dtype {p.dtype} --weights {p.weights}"
