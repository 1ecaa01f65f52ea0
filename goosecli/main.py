"""The `goose` command: the app with every command registered (each command lives in its own module)."""

from __future__ import annotations

from goosecli import bench, chat, doctor, viz  # noqa: F401  (importing each module adds its command to `app`)
from goosecli.app import app

__all__ = ["app"]
