"""The one Typer app behind the `goose` command; each command module adds its command to it."""

from __future__ import annotations

import sys

import typer

from drafting.errors import run_failure


class GooseApp(typer.Typer):
    """The app, with the one place an error met while running (the GPU out of memory, an engine refusing a pass)
    becomes one sentence and a non-zero exit instead of a traceback, whichever command met it; bad input is
    refused by each command before it runs."""

    def __call__(self, *args, **kwargs):
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:
            sentence = run_failure(exc)
            if sentence is None:  # not a failure goose knows: a bug, whose traceback is wanted
                raise
        print(f"goose: {sentence}", file=sys.stderr)
        sys.exit(1)


app = GooseApp(
    name="goose",
    help="Training-free speculative decoding you can watch: GOOSE spine trees, PTD and their baselines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
