"""`tr`, `iso` and `goose` through the real decode loop: mechanics on the tiny model, losslessness against
`ar` on the real prompts with the embedded model (every ablation switch and both budget modes covered)."""

import pytest

from drafting.engine.decode import Decoder
from drafting.errors import SpecError
from drafting.speculators import create
from drafting.engine.tree import ALIGNED, OWN_TEXT, SPINE, SPINE_BRANCH
from drafting.sources.output_memory import NO_MEMORY

PROMPT = [1, 5, 9, 13, 5, 9, 13, 17, 21, 5, 9, 13, 17, 21, 25, 5, 9, 13]


@pytest.mark.parametrize(
    "spec", ["tr", "tr:budget=80", "iso", "iso:k=5,budget=60", "goose", "goose:budget=60", "goose:rho=0",
             "goose:bigram=off", "goose:confidence=off", "goose:harvest=off", "goose:memory=0", "goose:own=off",
             "goose:aligned=off"],
)
def test_tiny_model_matches_ar(flat_tiny_lm, spec):
    want = Decoder(flat_tiny_lm, create("ar")).generate(PROMPT, 40).output_ids
    dec = Decoder(flat_tiny_lm, create(spec))
    steps = 0
    for _ in range(2):  # the second run starts with the table the first one filled (hot start)
        res = dec.generate(PROMPT, 40)
        assert res.output_ids == want
        steps += res.steps
    info = res.records[0].info
    assert isinstance(info["route"], str) and isinstance(info["budget"], int)
    stats = dec.speculator.stats()
    assert stats["steps"] == steps and stats["table_rows"] > 0


def test_goose_step_facts(tiny_lm):
    dec = Decoder(tiny_lm, create("goose:budget=60"))
    res = dec.generate(PROMPT, 30)
    for rec in res.records:
        info = rec.info
        assert {"route", "budget", "confidence", "ema", "bypass", "spine_continuation"} <= set(info)
        assert info["route"] in ("spine", "branch", "chain", "single")
        assert info["bypass"] in (0, 1) and 0.0 <= info["confidence"] <= 1.0
        accepted_branch = sum(1 for i in rec.accepted if rec.sources[i] == SPINE_BRANCH)
        assert info["spine_continuation"] == accepted_branch
        if info["bypass"]:
            assert set(rec.sources[1:]) <= {SPINE}


def test_goose_recalls_its_earlier_answers_and_says_where_its_spine_came_from(tiny_lm):
    want = Decoder(tiny_lm, create("ar")).generate(PROMPT, 40).output_ids
    dec = Decoder(tiny_lm, create("goose:budget=60,aligned=off"))  # the aligned text would hold the answer too
    first = dec.generate(PROMPT, 40)
    again = dec.generate(PROMPT, 40)  # the memory now holds the first answer
    assert first.output_ids == again.output_ids == want
    sources = [rec.info["spine_source"] for rec in again.records]
    assert set(sources) <= {"context", "own", "memory", "none"} and "memory" in sources
    assert "memory" not in [rec.info["spine_source"] for rec in first.records]
    fresh = Decoder(tiny_lm, create("goose:budget=60,memory=0,own=off,aligned=off")).generate(PROMPT, 40)
    assert fresh.output_ids == want and {rec.info["spine_source"] for rec in fresh.records} <= {"context", "none"}
    with pytest.raises(SpecError, match="memory"):
        create("goose:memory=-1")


def test_goose_reads_its_own_text_by_the_majority_of_earlier_occurrences():
    # after "5 9" the text went on "1 2" twice and "3 4" once, most recently; no 3-gram of its end occurred before,
    # so the context matcher has nothing and the own text's majority is the spine
    context = [7, 5, 9, 1, 2, 5, 9, 1, 2, 6, 5, 9, 3, 4, 8, 5, 9]
    spec = create("goose:budget=60")
    spec.reset(context)
    found = spec.own_text(context).lookup(20)
    assert found.chain[:2] == [1, 2] and found.support == 3
    spine, side, _ = spec.pick_spine(spec.matcher.spine(), NO_MEMORY, 60, found)
    assert spine.source == OWN_TEXT and spine.tokens[:2] == [1, 2] and side is None
    longer = context + [1, 2, 5, 9]  # the own text follows the context as it grows: "9 1 2 5 9" is new
    assert spec.own_text(longer).lookup(20).match == 6
    assert create("goose:own=off").own_text(context) is None


def test_goose_lays_the_text_an_edit_copies_as_its_spine_and_tags_it():
    prompt = [1, 2, 3] + list(range(100, 140))  # an instruction, then the file to edit
    spec = create("goose:budget=60")
    spec.reset(prompt + [100])
    spec.aligned.extend([101, 102, 103, 104, 105])  # the answer so far: the file's opening, copied
    context = prompt + [100, 101, 102, 103, 104, 105]
    spine, _, conf = spec.pick_spine(spec.matcher.spine(), NO_MEMORY, 60, aligned=spec.aligned.lookup(100))
    assert spine.source == ALIGNED and spine.tokens[:3] == [106, 107, 108] and conf > 0
    cand = spec.candidates(context)
    assert cand.info["spine_source"] == ALIGNED and cand.info["aligned_at"] == 9  # 106 sits at position 9
    assert cand.tree.sources[1] == ALIGNED and cand.tree.tokens[1] == 106  # its own tag, not "spine"
    spec.aligned.extend([777])  # an insertion: the answer leaves the file
    assert spec.candidates(context + [777]).info["aligned_left"] == 9
    assert create("goose:aligned=off").aligned is None


def test_adjacency_cache_warms_a_new_speculator(flat_tiny_lm, tmp_path):
    path = tmp_path / "adj.npz"
    first = create(f"goose:cache={path}")
    Decoder(flat_tiny_lm, first).generate(PROMPT, 20)
    first.save_cache()
    assert path.exists()
    second = create(f"goose:cache={path}")
    assert len(second.table) == len(first.table) > 0
    path.write_text("garbage")  # not a table: ignored (one line says so) and replaced at the next save
    third = create(f"goose:cache={path}")
    assert len(third.table) == 0
    Decoder(flat_tiny_lm, third).generate(PROMPT, 20)
    third.save_cache()
    assert len(create(f"goose:cache={path}").table) == len(third.table) > 0
    with pytest.raises(SpecError):  # a table of other settings is refused, not overwritten
        create(f"goose:k={first.table_size() + 1},cache={path}")
