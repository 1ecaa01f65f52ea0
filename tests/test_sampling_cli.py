"""The sampling options reach every command that generates: bench, chat and viz."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ["bench", "chat", "viz"]


def _goose(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "goosecli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", COMMANDS)
def test_sampling_options_on_every_generating_command(command):
    out = _goose(command, "--help")
    assert out.returncode == 0, out.stderr
    for option in ("--temperature", "--top-k", "--top-p", "--seed"):
        assert option in out.stdout, f"goose {command} has no {option}"


@pytest.mark.parametrize("command,args", [("bench", ["examples/prompts.jsonl"]), ("chat", []), ("viz", ["--prompt", "hi"])])
def test_sampling_bad_top_p_fails_in_one_sentence(command, args):
    out = _goose(command, *args, "--temperature", "0.7", "--top-p", "1.5")
    assert out.returncode != 0
    assert "--top-p must be in (0, 1]" in out.stderr
    assert "Traceback" not in out.stderr

