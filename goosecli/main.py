"""The `goose` command: one Typer app; each command lives in its own module."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="goose",
    help="Training-free speculative decoding you can watch: GOOSE spine trees, PTD and their baselines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    from goosecli import bench, chat, doctor, viz  # noqa: F401  (each module adds its command to `app`)


_register()
