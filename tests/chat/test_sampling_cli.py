"""The sampling options reach every command that generates: bench, chat and viz."""

import json

import pytest
from support.cli import run_goose

COMMANDS = ["bench", "chat", "viz"]


def _goose(*args):
    return run_goose(*args, timeout=120, COLUMNS="200")


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


@pytest.mark.slow
def test_sampling_viz_records_with_the_sampling_acceptor(tmp_path):
    """`goose viz --prompt` records its traces through make_acceptor: the settings are in the trace header, and a
    seeded sampled trace repeats itself."""
    from drafting.engine.sampling_params import SamplingParams
    from goosecli.viz import record

    def run(folder, params):
        # unpriced: a priced chain follows the step times measured during the run, and so would its randomness
        (path,) = record("Write a haiku about geese.", "pld:priced=off", folder, None, "cpu", "auto", None, False, 12,
                         params)
        lines = path.read_text().splitlines()
        return json.loads(lines[0]), [json.loads(line).get("emitted") for line in lines[1:]]

    params = SamplingParams(temperature=0.9, top_k=40, seed=3)
    head, steps = run(tmp_path / "a", params)
    assert head["sampling"] == {"temperature": 0.9, "top_k": 40, "top_p": 1.0, "seed": 3}
    assert steps == run(tmp_path / "b", params)[1]
