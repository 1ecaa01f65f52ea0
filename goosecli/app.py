"""The one Typer app behind the `goose` command; each command module adds its command to it."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="goose",
    help="Training-free speculative decoding you can watch: GOOSE spine trees, PTD and their baselines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
