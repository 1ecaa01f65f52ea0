"""Run the `goose` CLI as a real subprocess from the repository root, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cli_env(**extra: str) -> dict:
    """The environment of a goose run: this repository first on PYTHONPATH, then an extra PYTHONPATH if given."""
    path = os.pathsep.join(p for p in (str(ROOT), extra.pop("PYTHONPATH", "")) if p)
    return dict(os.environ, **extra, PYTHONPATH=path)


def run_goose(*args: str, timeout: float = 600, input_text: str | None = None, **env: str) -> subprocess.CompletedProcess:
    """``goose ARGS`` run to its end; ``input_text`` is piped to its stdin."""
    return subprocess.run([sys.executable, "-m", "goosecli", *args], cwd=ROOT, env=cli_env(**env), input=input_text,
                          capture_output=True, text=True, timeout=timeout)
