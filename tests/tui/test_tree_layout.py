"""Node states, token provenance and the tree layout, on hand-made records."""

from support.tracefixtures import ID, goose_records, ptd_records
from tui.marks import ACCEPTED, CONTINUATION, REJECTED, ROOT, UNREACHED, node_states, provenance, row_states
from tui.treelayout import layout, token_label
from tui.views import covering, draft_rows_tree, verified_tree

WORD = {v: k for k, v in ID.items()}


def text(token):
    return WORD.get(token, f"<{token}>")


def test_states_mark_accepted_rejected_unreached_and_spine_continuation():
    step0, step1 = goose_records()[:2]
    s0 = node_states(step0)
    assert s0[:7] == [ROOT, ACCEPTED, ACCEPTED, ACCEPTED, ACCEPTED, REJECTED, UNREACHED]
    s1 = node_states(step1)
    # The path takes the spine's ")" then leaves it for the branch " -> int :": those three continue the spine.
    assert [s1[i] for i in step1.accepted] == [ROOT, ACCEPTED, CONTINUATION, CONTINUATION, CONTINUATION]
    assert s1.count(CONTINUATION) == step1.info["spine_continuation"]


def test_provenance_labels_every_emitted_token():
    step0, step1, step2, step3 = goose_records()
    assert provenance(step0) == ["spine"] * 4 + ["bonus"]
    assert provenance(step1) == ["spine", "continuation", "continuation", "continuation", "bonus"]
    assert provenance(step3) == ["bonus"]
    assert provenance(ptd_records()[0]) == ["guess", "guess", "bonus"]


def test_ptd_rows_draw_slots_as_trunk_with_grown_and_pruned_nodes():
    first = ptd_records()[0]
    assert row_states(first.rows) == ["kept", "kept", "kept", "pruned", "kept", "pruned"]
    tree, trunk = draft_rows_tree(first)
    # Slots " add" ( a chain from the root; " sum" hangs off " add", "," off "a", "(" off " sum"; grown: " b"
    # under "a" (row 2) and a new slot "," at the end of the chain.
    assert [text(t) for t in tree.tokens] == ["def", " add", "(", "a", " sum", ",", "(", " b", ","]
    assert tree.parents == [-1, 0, 1, 2, 1, 3, 4, 3, 3]
    assert trunk == [0, 1, 2, 3, 8]
    assert tree.markers[7] == tree.markers[8] == "+" and tree.markers[4] == "✂"
    assert row_states({"tokens": [1, 2, 3], "grown": [True, False, False], "pruned": [2]}) == ["grown", "kept", "pruned"]
    assert draft_rows_tree(ptd_records()[3]) is None


def test_lookahead_rows_become_one_chain_per_column():
    from drafting.engine.trace import StepRecord

    rec = StepRecord(0, 0, [5], [-1], ["root"], [0], [6], 0, 0,
                     rows={"kind": "lookahead", "tokens": [10, 11, 12, 13], "offsets": [1, 2, 2, 3],
                           "column": [0, 1, 0, 1], "level": [0, 0, 1, 1]})
    tree, trunk = draft_rows_tree(rec)
    assert tree.parents == [-1, 0, 1, 1, 2]


def test_spine_is_the_trunk():
    tree, trunk = verified_tree(goose_records()[0])
    assert [text(tree.tokens[n]) for n in trunk] == ["def", " add", "(", "a", ",", " c", " d"]


def test_big_tree_collapses_with_counts_that_add_up():
    record = goose_records()[3]
    tree, trunk = verified_tree(record)
    for width, height in ((40, 6), (80, 20), (200, 50)):
        lines = layout(tree, trunk, text, width, height)
        assert len(lines) <= height
        shown = {seg.node for line in lines for seg in line if seg.node is not None}
        hidden = sum(int(seg.text.strip()[1:]) for line in lines for seg in line
                     if seg.node is None and seg.text.strip().startswith("+"))
        assert len(shown) + hidden == len(tree.tokens)
        assert all(sum(len(s.text) for s in line) <= width for line in lines)


def test_long_trunk_is_cut_with_a_note():
    tree, trunk = verified_tree(goose_records()[0])
    lines = layout(tree, trunk, text, 60, 4)
    assert len(lines) == 4 and lines[-1][0].text.startswith("⋮ +4 trunk nodes")


def test_token_labels_show_whitespace_and_cut_long_tokens():
    assert token_label(" cat") == "cat"
    assert token_label("\n") == "⏎"
    assert token_label("  ") == "␣␣"
    assert token_label("x" * 40).endswith("…") and len(token_label("x" * 40)) == 12


def test_covering_finds_the_step_of_an_output_position():
    ptd = ptd_records()
    assert [covering(ptd, p) for p in (0, 2, 3, 8, 9, 15, 99)] == [0, 0, 1, 2, 3, 4, 4]


def test_the_step_summary_names_where_the_spine_came_from():
    import dataclasses

    from tui.treepane import TreePane

    first = goose_records()[0]
    rec = dataclasses.replace(first, info={**first.info, "spine_source": "memory"})
    lines = TreePane("spine", text)._summary(rec, 100)
    facts = "".join(seg.text for seg in lines[1])
    assert "spine from memory" in facts
    plain = "".join(seg.text for seg in TreePane("spine", text)._summary(first, 100)[1])
    assert "spine from" not in plain
