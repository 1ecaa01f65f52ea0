"""`goose viz` on fixture traces: keys step, jump, play, show node details; the tree widget's look is pinned by
snapshots."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from textual.app import App

from drafting.engine.trace import read_trace
from support.screentext import screen_text, sync
from support.tracefixtures import WORDS, goose_records, ptd_records, write_fixture_traces
from tui.treepane import TreePane
from tui.viz_app import Opened, VizApp

ROOT = Path(__file__).resolve().parents[2]


def open_app(folder: Path, which=("goose", "ptd")) -> VizApp:
    goose, ptd = write_fixture_traces(folder)
    paths = {"goose": goose, "ptd": ptd}
    return VizApp([Opened(paths[w].name, read_trace(paths[w])) for w in which], play_interval=0.05)


@sync
async def test_panes_are_titled_and_aligned_on_the_output_position(tmp_path):
    app = open_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = screen_text(app)
        assert "spine tree · goose" in screen and "PTD draft tree · ptd" in screen
        assert "step 1/4 · output position 0" in screen
        assert "✓ accepted" in screen and "↪ spine continuation" in screen and "not reached" in screen
        await pilot.press("right")
        screen = screen_text(app)
        assert "step 2/4 · output position 5" in screen
        # goose's step 1 makes tokens 5-9; ptd's step covering position 5 is its step 1 (tokens 3-6).
        assert "step 1 · tokens 5–9" in screen and "step 1 · tokens 3–6" in screen
        assert "↪->" in screen  # the spine continuation, marked without colour
        await pilot.press("end")
        assert "step 4/4 · output position 15" in screen_text(app)
        await pilot.press("home")
        assert "step 1/4" in screen_text(app)


@sync
async def test_go_to_position_and_play(tmp_path):
    app = open_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g", "1", "2", "enter")
        assert "step 3/4 · output position 10" in screen_text(app)
        await pilot.press("home", "space")
        for _ in range(100):  # three steps at 0.05 s; a loaded machine may take longer
            await pilot.pause(0.05)
            screen = screen_text(app)
            if "step 4/4" in screen and "paused" in screen:
                break
        assert "step 4/4" in screen and "paused" in screen  # played to the end, then paused


@sync
async def test_enter_shows_token_source_depth_and_top5(tmp_path):
    app = open_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(*["down"] * 5, "enter")  # row by row: def, its branches sum ( main, then add
        screen = screen_text(app)
        assert "token ' add'  id 101" in screen and "source spine · depth 1 · state ✓ accepted" in screen
        assert "target's top-5 here" in screen and "61.0%" in screen and "'(' (102)" in screen
        await pilot.press("escape")
        assert "target's top-5" not in screen_text(app)
        await pilot.press("q")
    assert app.return_code == 0


@sync
async def test_one_trace_alone_says_what_is_missing(tmp_path):
    app = open_app(tmp_path, which=("goose",))
    async with app.run_test(size=(80, 24)):
        assert "No PTD trace open" in screen_text(app)
    app = open_app(tmp_path, which=("ptd",))
    async with app.run_test(size=(80, 24)):
        screen = screen_text(app)
        assert "No spine-tree trace open" in screen and "draft tree · 6 rows" in screen


class OneTree(App):
    """Just the tree widget, for snapshots of fixed records."""

    CSS = "TreePane { border: round white; padding: 0 1; }"

    def __init__(self, record, kind):
        super().__init__()
        self.record, self.kind = record, kind

    def compose(self):
        words = {i + 100: w for i, w in enumerate(WORDS)}
        yield TreePane(self.kind, lambda t: words.get(t, f"<{t}>"))

    def on_mount(self):
        self.query_one(TreePane).show(self.record)


@pytest.mark.parametrize("step", [0, 1, 3])
def test_spine_tree_snapshot(snap_compare, step):
    assert snap_compare(OneTree(goose_records()[step], "spine"), terminal_size=(60, 16))


def test_ptd_tree_snapshot(snap_compare):
    assert snap_compare(OneTree(ptd_records()[0], "ptd"), terminal_size=(50, 20))


def test_whole_viz_screen_snapshot(snap_compare, tmp_path):
    assert snap_compare(open_app(tmp_path), terminal_size=(80, 24), press=["right"])


def _viz(*args, cwd=ROOT):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "GOOSE_CACHE": os.environ["GOOSE_CACHE"]}
    return subprocess.run([sys.executable, "-m", "goosecli", "viz", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "content, words",
    [(None, "does not exist"), ("", "is empty"), ('{"goose_trace": 99}\n', "format version 99"),
     ('{"goose_trace": 1}\n', "holds no steps"), ("PK\x03\x04 zip\n", "not a goose trace")],
)
def test_cli_bad_trace_one_sentence(tmp_path, content, words):
    path = tmp_path / "t.jsonl"
    if content is not None:
        path.write_text(content)
    done = _viz(str(path))
    assert done.returncode == 2
    assert words in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_cli_needs_a_trace_or_a_prompt(tmp_path):
    done = _viz()
    assert done.returncode == 2 and "--prompt" in done.stderr and "Traceback" not in done.stderr
    done = _viz(str(tmp_path))
    assert done.returncode == 2 and "is a folder" in done.stderr


def test_partner_trace_is_found_by_prompt_id(tmp_path):
    from goosecli.viz import partner

    goose, ptd = write_fixture_traces(tmp_path)
    assert partner(goose) == [ptd] and partner(ptd) == [goose]
