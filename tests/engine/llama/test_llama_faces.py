"""The faces on llama.cpp: `goose bench --engine llama.cpp` names the engine and its weights and proves each row
against `ar` up to near-ties; the chat app answers and draws each step's tree; viz records and shows the spine and
PTD trees; what the engine cannot run is refused in one sentence before anything runs."""

from __future__ import annotations

import json

import pytest
from support.cli import run_goose
from support.chat_pilot import ask, wait_answer
from support.screentext import screen_text, sync

from drafting.engine.trace import read_trace

pytest.importorskip("llama_cpp")  # the engine is an extra: `make llamacpp-setup`


def test_bench_on_llama_cpp_names_the_engine_and_checks_every_row(tmp_path):
    out = tmp_path / "b.json"
    done = run_goose("bench", "examples/prompts.jsonl", "--engine", "llama.cpp", "-s", "pld,goose,ptd,llama.cpp",
                     "-n", "24", "--limit", "2", "--json", str(out), timeout=600)
    assert done.returncode == 0, done.stderr
    assert "llama.cpp Q4_1" in done.stdout + done.stderr
    doc = json.loads(out.read_text())
    assert doc["engine"] == "llama.cpp" and doc["mode"] == "llama.cpp Q4_1"
    runs = doc["runs"]
    assert {r["speculator"] for r in runs} == {"ar", "pld", "goose", "ptd", "llama.cpp"} and len(runs) == 10
    for r in runs:
        assert r["new_tokens"] > 0
        if not r.get("external"):
            assert r["exact_up_to_ties"], r
            assert r["forward_s"] > 0 and r["forward_passes"] >= r["steps"]


@pytest.mark.parametrize("args, words", [
    (["-s", "hf-ar"], "transformers engine only"),
    (["--weights", "int8"], "transformers engine option"),
    (["--dtype", "bfloat16"], "transformers engine option"),
    (["--model", "{folder}"], "runs GGUF files"),
    (["--engine", "vllm"], "Unknown engine"),
    (["--engine", "transformers", "--weights", "q8_0"], "add --engine llama.cpp"),
])
def test_what_llama_cpp_cannot_run_is_refused_in_one_sentence(tmp_path, args, words):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    (tmp_path / "config.json").write_text("{}")  # a transformers folder, as far as finding the model goes
    args = [a.replace("{folder}", str(tmp_path)) for a in args]
    engine = [] if "--engine" in args else ["--engine", "llama.cpp"]
    done = run_goose("bench", str(prompts), *engine, *args, "-n", "4", timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_plain_chat_on_llama_cpp_answers_and_says_its_engine(tmp_path):
    done = run_goose("chat", "--plain", "--engine", "llama.cpp", "-n", "8", "-s", "goose", "--trace",
                     str(tmp_path / "t.jsonl"), input_text="Name a colour.\nAnd a fruit?\n", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "llama.cpp Q4_1" in done.stderr and done.stdout.strip()
    trace = read_trace(tmp_path / "t.jsonl")
    assert len(trace.sections) == 2


@sync
async def test_chat_app_on_llama_cpp_draws_each_steps_tree(llama_lm):
    from drafting.chat.session import ChatSession
    from tui.chat_app import ChatApp

    session = ChatSession(llama_lm, "goose:budget=8", max_new_tokens=12)
    session.ar_step_s = 0.02
    app = ChatApp(session)
    async with app.run_test(size=(100, 30)) as pilot:
        await ask(app, pilot, "Repeat: one two three, one two three, one two three.")
        await wait_answer(app, pilot)
        screen = screen_text(app)
        assert "llama.cpp Q4_1" in screen and "goose › " in screen and "step tree · goose" in screen


@sync
async def test_viz_records_and_shows_spine_and_ptd_trees_on_llama_cpp(tmp_path):
    from goosecli.viz import record
    from tui.viz_app import Opened, VizApp

    paths = record("Count from one to ten, then back.", "goose,ptd", tmp_path, None, "auto", "auto", None, False, 24,
                   engine="llama.cpp")
    opened = [Opened(p.name, read_trace(p)) for p in paths]
    assert [o.trace.header["engine"] for o in opened] == ["llama.cpp", "llama.cpp"]
    app = VizApp(opened)
    async with app.run_test(size=(110, 30)) as pilot:
        await pilot.press("right")
        screen = screen_text(app)
        assert "llama.cpp Q4_1" in screen and "spine tree · goose" in screen and "PTD draft tree · ptd" in screen
