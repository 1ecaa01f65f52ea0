"""`goose chat`: chat through a speculator in a Textual app, or as a plain line REPL (`--plain`, pipes)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from goosecli.app import app
from goosecli.options import (
    SPECULATORS,
    Engine,
    Device,
    DeviceMap,
    Dtype,
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
)



@app.command(cls=RegistryHelp)
def chat(
    speculator: Annotated[Optional[str], typer.Option("--speculator", "-s", help="Speculator spec, e.g. goose or pld:draft=8 (default goose; F2 switches in the app). One of " + SPECULATORS + "; their options are listed below.", show_default=False)] = None,
    model: Model = None,
    device: Device = "auto",
    engine: Engine = "transformers",
    dtype: Dtype = "auto",
    weights: Weights = "auto",
    device_map: DeviceMap = None,
    raw: Raw = False,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", "-n", help="Most new tokens per answer.", min=1)] = 256,
    system: Annotated[Optional[str], typer.Option("--system", help="System message that opens the conversation.")] = None,
    trace: Annotated[Optional[Path], typer.Option("--trace", help="Write every step to this trace file (one section per turn) for `goose viz`.")] = None,
    plain: Annotated[bool, typer.Option("--plain", help="No full-screen app: a line REPL. With piped stdin, each non-empty line is one turn of one conversation.")] = False,
    full_prefill: Annotated[bool, typer.Option("--full-prefill", help="Prefill the whole conversation every turn instead of keeping its KV cache between turns (the reference for timing the kept cache).")] = False,
    temperature: Temperature = 0.0,
    top_k: TopK = 0,
    top_p: TopP = 1.0,
    seed: Seed = None,
) -> None:
    """Chat through a speculator and watch each step's tree and the live speed."""
    from drafting.engine.acceptance import make_acceptor
    from drafting.errors import SpecError
    from drafting.speculators import DEFAULT_SPECULATOR, registry

    params = sampling_or_fail(temperature, top_k, top_p, seed)
    acceptor = make_acceptor(params)
    try:
        registry()
    except SpecError as exc:  # a module named in GOOSE_SPECULATORS does not import
        fail(str(exc))
    speculator = speculator or DEFAULT_SPECULATOR
    if trace is not None and trace.is_dir():
        fail(f"--trace {str(trace)!r} is a folder; give a file name for the trace.")
    lm = load_or_fail(model, device, dtype, device_map, weights, engine)

    from drafting.chat.session import ChatSession

    try:
        session = ChatSession(lm, speculator, acceptor=acceptor, max_new_tokens=max_new_tokens, system=system,
                              raw=raw, trace_path=trace, keep_cache=not full_prefill)
    except SpecError as exc:
        fail(str(exc))
    except OSError as exc:  # the trace file is the one file a chat opens as it starts
        where = f"write the trace file {str(trace)!r}" if trace is not None else "start the chat"
        fail(f"Cannot {where}: {exc.strerror or exc}.")
    try:
        if plain or not sys.stdin.isatty() or not sys.stdout.isatty():
            run_plain(session, interactive=sys.stdin.isatty())
        else:
            from tui.chat_app import ChatApp

            chat_app = ChatApp(session)
            chat_app.run()
            chat_app.wait_idle()
    finally:
        session.close()


def run_plain(session, interactive: bool) -> None:
    """Answer prompts line by line, streaming each answer; a one-line summary per answer goes to stderr."""
    from rich.console import Console

    from drafting.errors import ContextError

    out, err = Console(highlight=False), Console(stderr=True, highlight=False)
    with err.status("measuring plain decoding (ar) for the speedup figure…"):
        session.measure_baseline()
    keys = " · /new starts over, Ctrl+D quits" if interactive else ""
    err.print(f"goose chat · {session.lm.name} ({session.lm.engine_mode}) · {session.speculator}{keys}", style="grey50")
    if interactive:
        while True:
            try:
                text = input("you › ").strip()
            except EOFError:
                break
            if text == "/new":
                session.new_conversation()
                continue
            if text in ("/quit", "/exit"):
                break
            if text:
                try:
                    answer(session, text, out, err)
                except ContextError as exc:
                    err.print(f"goose: {exc}", style="red")
        return
    for text in (line.strip() for line in sys.stdin.read().splitlines()):
        if text:
            try:
                answer(session, text, out, err)
            except ContextError as exc:
                fail(str(exc))


def answer(session, text: str, out, err) -> None:
    from tui.marks import PROVENANCE_STYLE, provenance
    from drafting.models.detokenize import Detokenizer
    from tui.stats import LiveStats

    stats = LiveStats()
    detok = Detokenizer(session.lm.tokenizer, session.lm.eos_ids)
    stream = session.ask(text)
    stopped = False
    try:
        for record, elapsed in stream:
            stats.add(record, elapsed, session.baseline)
            for token, how in zip(record.emitted, provenance(record)):
                piece = detok.push(token)
                if piece:
                    out.print(piece, end="", style=PROVENANCE_STYLE[how] or None, markup=False, soft_wrap=True)
            out.file.flush()
    except KeyboardInterrupt:
        stream.close()  # the partial answer joins the history
        stopped = True
    out.print()
    speed = stats.speed_text(session.ar_step_s, session.baseline)
    first = ""
    if session.first_token_s is not None:
        first = (f" · turn {session.turns} first token {session.first_token_s:.3f} s"
                 f" (prefilled {session.prefilled} of {session.prompt_tokens} prompt tokens)")
    err.print(
        f"── {session.speculator} · {stats.tokens} tokens in {stats.steps} steps · {stats.mean_accepted:.2f} tok/step"
        f" · {stats.tokens_per_s:.1f} tok/s{speed}{first}{' · stopped' if stopped else ''}",
        style="grey50", soft_wrap=True,
    )
