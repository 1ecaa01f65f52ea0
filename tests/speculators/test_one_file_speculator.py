"""A speculator of one's own is one file: a module named in GOOSE_SPECULATORS is registered without editing goose,
is listed by `goose bench --help` and `goose viz --help`, takes its settings from a spec, and runs in
`goose bench` with output identical to `ar`."""

from __future__ import annotations

import json

import pytest
from support.cli import run_goose

import drafting.speculators as speculators
from drafting.engine.decode import Decoder
from drafting.errors import SpecError

TOY = '''
"""The last token repeated as a chain: a speculator in one file."""

from dataclasses import dataclass

from drafting.engine.tree import CONTEXT, Draft, DraftTree
from drafting.speculators import Settings, SpecError, Speculator, option


@dataclass(frozen=True)
class RepeatSettings(Settings):
    draft: int = option(3, "tokens drafted per step, each the last token again")

    def __post_init__(self):
        if self.draft < 1:
            raise SpecError("toy needs draft >= 1.")


class Repeat(Speculator):
    name = "NAME"
    summary_line = "the last token repeated as a chain (a speculator in one file)"
    settings_class = RepeatSettings

    def propose(self, context):
        tree = DraftTree(context[-1])
        parent = 0
        for _ in range(self.settings.draft):
            parent = tree.add(context[-1], parent, CONTEXT)
        return Draft(tree=tree)
'''


def write_toy(folder, module: str = "toy_speculator", name: str = "toy") -> dict:
    """The toy module in ``folder``; the environment that makes goose load it."""
    (folder / f"{module}.py").write_text(TOY.replace('"NAME"', repr(name)))
    return {"PYTHONPATH": str(folder), "GOOSE_SPECULATORS": module}


def flat(help_text: str) -> str:
    """Help text without its panel borders and line wrapping: one space between words."""
    return " ".join(help_text.replace("│", " ").split())


@pytest.fixture
def fresh_registry(monkeypatch, tmp_path):
    """The registry read again in this process, with tmp_path importable; the real one is put back after."""
    monkeypatch.setattr(speculators, "_REGISTRY", None)
    monkeypatch.syspath_prepend(str(tmp_path))
    return monkeypatch


def test_a_module_named_in_the_environment_is_registered_after_goose_own(fresh_registry, tmp_path, tiny_lm):
    env = write_toy(tmp_path, module="toy_in_process")
    fresh_registry.setenv("GOOSE_SPECULATORS", env["GOOSE_SPECULATORS"])
    names = list(speculators.registry())
    assert names == ["ar", "pld", "tr", "iso", "goose", "lookahead", "ptd", "toy"]
    toy = speculators.create("toy:draft=2")
    assert toy.settings.draft == 2 and toy.spec() == "toy:draft=2" and not toy.draws_rows
    assert speculators.create(toy.spec()).settings == toy.settings
    with pytest.raises(SpecError, match="toy needs draft >= 1."):
        speculators.create("toy:draft=0")
    with pytest.raises(SpecError, match="Speculator 'toy' has no option 'rows'; its options: draft."):
        speculators.create("toy:rows=4")
    prompt = [3, 44, 17, 90, 5, 5, 5, 61, 23, 8]
    ref = Decoder(tiny_lm, speculators.create("ar")).generate(prompt, 24)
    got = Decoder(tiny_lm, toy).generate(prompt, 24)
    assert got.output_ids == ref.output_ids
    assert any(len(r.tokens) == 3 for r in got.records)  # it drafted: root + two repeats


def test_a_name_taken_by_goose_is_refused(fresh_registry, tmp_path):
    env = write_toy(tmp_path, module="toy_clash", name="goose")
    fresh_registry.setenv("GOOSE_SPECULATORS", env["GOOSE_SPECULATORS"])
    with pytest.raises(SpecError, match="Speculator name 'goose' of toy_clash is taken by drafting.speculators.goose."):
        speculators.registry()


def test_a_module_that_does_not_import_is_one_sentence(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": "p1", "prompt": "Hi."}) + "\n")
    proc = run_goose("bench", str(path), "-s", "ar", timeout=120, GOOSE_SPECULATORS="no_such_speculator_module")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "Cannot import the speculator module 'no_such_speculator_module' named in GOOSE_SPECULATORS" in proc.stderr


def test_bench_and_viz_help_list_it_with_its_options(tmp_path):
    env = write_toy(tmp_path)
    bench = run_goose("bench", "--help", timeout=120, **env)
    assert bench.returncode == 0, bench.stderr
    text = flat(bench.stdout)
    assert "Speculators: ar, pld, tr, iso, goose, lookahead, ptd, toy (their options are listed below)" in text
    assert "toy: the last token repeated as a chain (a speculator in one file)" in text
    assert "draft=3 tokens drafted per step, each the last token again" in text
    viz = run_goose("viz", "--help", timeout=120, **env)
    assert viz.returncode == 0, viz.stderr
    text = flat(viz.stdout)
    assert "the first tree one (ar, pld, tr, iso, goose, toy) and the first draft-row one (lookahead, ptd)" in text


@pytest.mark.slow
def test_bench_runs_it_identical_to_ar(tmp_path):
    env = write_toy(tmp_path)
    prompts, out = tmp_path / "p.jsonl", tmp_path / "out.json"
    prompts.write_text(json.dumps({"id": "p1", "task": "count", "prompt": "Count: one one one one one"}) + "\n")
    proc = run_goose("bench", str(prompts), "-s", "ar,toy:draft=2", "-n", "8", "--dtype", "float32",
                     "--weights", "float", "--json", str(out), **env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert [r["speculator"] for r in doc["runs"]] == ["ar", "toy:draft=2"]
    ar, toy = doc["runs"]
    assert toy["identical_to_ar"] is True and toy["first_divergence"] is None
    assert toy["new_tokens"] == ar["new_tokens"] > 0
