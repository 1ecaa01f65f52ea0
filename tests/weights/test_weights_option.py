"""`--weights` reaches the model loader in every command that loads a model (chat and viz --prompt as well as
bench and doctor): a real subprocess, as a user runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.cli import ROOT, cli_env, run_goose

from drafting.weights import int8 as int8_linear


@pytest.mark.parametrize("command,args", [("chat", ["--plain"]), ("viz", ["--prompt", "hi"])])
def test_weights_option_is_checked_before_loading(command, args):
    bad = run_goose(command, *args, "--weights", "int4", timeout=60)
    assert bad.returncode != 0 and "Unknown weight format 'int4'" in bad.stderr and "Traceback" not in bad.stderr
    clash = run_goose(command, *args, "--weights", "int8", "--dtype", "float32", timeout=60)
    assert clash.returncode != 0 and "--dtype bfloat16" in clash.stderr and "Traceback" not in clash.stderr


@pytest.mark.heavy  # a whole chat command in a fresh process, converting to int8
@pytest.mark.slow
@pytest.mark.skipif(not int8_linear.available(), reason="this torch build has no weight-only int8 CPU kernel")
def test_chat_answers_with_int8_weights():
    done = subprocess.run([sys.executable, "-m", "goosecli", "chat", "--plain", "--weights", "int8", "-n", "6", "-s", "pld"],
                          input="Say hello.\n", cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and done.stdout.strip()
