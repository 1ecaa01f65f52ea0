"""GooseProposer's traces (setting ``trace=DIR``): one goose trace per request whose accepted counts add up to
what the engine accepted, whose emitted tokens are what it committed, and which `goose viz` opens and steps
through like a trace of goose's own engines. Driven by the vLLM-shaped batch of test_vllm_proposer (no vLLM
needed); a real vLLM run writes the same files (docs/vllm.md)."""

from __future__ import annotations

from test_vllm_proposer import FakeBatch, proposer, repetitive

from support.screentext import screen_text, sync

from drafting.engine.trace import read_trace
from drafting.integrations.vllm import SettingsError, parse_settings
from drafting.integrations import vllm_trace


def _run(tmp_path, requests: int = 3, steps: int = 40, settings: str = ""):
    """Requests decoded to near their end, then finished; (the engine's accepted drafts, tokens it committed
    after each request's first proposal, the trace files)."""
    p, batch = proposer(settings=",".join(filter(None, [f"trace={tmp_path}", settings]))), FakeBatch()
    for seed in range(requests):
        batch.add(repetitive(seed, 240), prompt_len=60)
    accepted = committed = 0
    proposed_before = [False] * requests
    for _ in range(steps):
        if any(batch.num_tokens_no_spec[r] >= len(t) - 1 for r, t in enumerate(batch.targets)):
            break
        sampled = batch.step()
        for row, s in enumerate(sampled):
            if proposed_before[row]:
                accepted += len(s) - 1
                committed += len(s)
        batch.run(p, sampled)
        proposed_before = [True] * requests
    p.propose([], [], batch.token_ids_cpu[:0])  # every request finished: their files are closed
    return accepted, committed, sorted(tmp_path.glob("*.jsonl"))


def test_the_traces_add_up_to_what_the_engine_accepted_and_committed(tmp_path):
    accepted, committed, files = _run(tmp_path)
    assert len(files) == 3 and accepted > 20
    records = [r for f in files for r in read_trace(f).records]
    assert sum(len(r.accepted) - 1 for r in records) == accepted
    assert sum(len(r.emitted) for r in records) == committed
    for r in records:
        assert len(r.tokens) == len(r.parents) == len(r.sources) and r.accepted == list(range(len(r.accepted)))
        assert all(len(entry) == 3 for entry in r.info["offered"])  # source, length, tokens the engine agreed with
        assert r.info["spine_source"] in {"none", *vllm_trace.TAGS.values()}
    assert {r.info["spine_source"] for r in records} - {"none"}, "no chain was drafted"


def test_tracing_is_bounded_and_off_by_default(tmp_path):
    assert parse_settings("")["trace"] == ""
    assert proposer().trace is None
    p = proposer(settings=f"trace={tmp_path}")
    p.trace.max_requests = 2
    batch = FakeBatch()
    for seed in range(4):
        batch.add(repetitive(seed), prompt_len=40)
    for _ in range(3):
        batch.run(p, batch.step())
    assert len(list(tmp_path.glob("*.jsonl"))) == 2


def test_an_unwritable_trace_folder_is_one_sentence(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    try:
        proposer(settings=f"trace={blocker}/traces")
    except SettingsError as exc:
        assert str(exc).count(".") == 1 and "trace" in str(exc)
    else:
        raise AssertionError("a trace folder under a file was accepted")


@sync
async def test_goose_viz_steps_through_a_proposer_trace(tmp_path):
    from tui.viz_app import Opened, VizApp

    _accepted, _committed, files = _run(tmp_path, requests=1)
    trace = read_trace(files[0])
    app = VizApp([Opened(files[0].name, trace)], play_interval=0.05)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = screen_text(app)
        assert "spine tree · goose" in screen and f"step 1/{len(trace.records)}" in screen
        assert "offered: " in screen and "agreed)" in screen  # the candidates of the step, beside its chain
        await pilot.press("right")
        assert f"step 2/{len(trace.records)}" in screen_text(app)
