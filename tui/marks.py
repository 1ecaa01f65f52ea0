"""What each drafted node became in a step, and how a produced token came to be.

Every state has a marker character as well as a colour, so the views read the same without colour.
"""

from __future__ import annotations

from drafting.engine.trace import StepRecord
from drafting.engine.tree import ALIGNED as ALIGNED_SOURCE, SPINE_TAGS as TRUNK_SOURCES  # what GOOSE lays as its spine

# Node states in a verified tree.
ROOT = "root"
ACCEPTED = "accepted"
CONTINUATION = "continuation"  # accepted after the path left the spine for a branch
REJECTED = "rejected"  # its parent was accepted, the target chose another token
UNREACHED = "unreached"  # its parent was never accepted, so the target's verdict did not matter

MARKER = {ROOT: "●", ACCEPTED: "✓", CONTINUATION: "↪", REJECTED: "✗", UNREACHED: "·"}
STYLE = {
    ROOT: "bold",
    ACCEPTED: "bold green",
    CONTINUATION: "bold magenta",
    REJECTED: "red",
    UNREACHED: "grey50",
}
ALIGNED_STYLE = "bold dodger_blue1"  # an accepted node of a chain read from the text the answer is copying
LEGEND = [(ACCEPTED, "accepted"), (CONTINUATION, "spine continuation"), (REJECTED, "rejected"), (UNREACHED, "not reached")]

# Draft-row states (PTD's in-model draft tree).
GROWN = "grown"
PRUNED = "pruned"
KEPT = "kept"
ROW_MARKER = {GROWN: "+", PRUNED: "✂", KEPT: "•"}
ROW_STYLE = {GROWN: "bold cyan", PRUNED: "yellow strike", KEPT: "cyan"}

# How an emitted token was produced (chat transcript shading).
PROVENANCE_STYLE = {
    "aligned": "dodger_blue1",
    "spine": "green",
    "branch": "cyan",
    "continuation": "magenta",
    "guess": "yellow",
    "bonus": "",
}
PROVENANCE_LABEL = {
    "aligned": "copied from the text being edited",
    "spine": "spine / context match",
    "branch": "branch",
    "continuation": "spine continuation",
    "guess": "PTD / pool guess",
    "bonus": "bonus / plain step",
}

SPINE_SOURCES = TRUNK_SOURCES | {"context"}
BRANCH_SOURCES = {"spine-branch", "root-alt", "adjacency", "memory", "own"}
GUESS_SOURCES = {"pool", "ptd-guess"}


def node_states(record: StepRecord) -> list[str]:
    """The state of every tree node of a step."""
    accepted = set(record.accepted)
    states = []
    for i, parent in enumerate(record.parents):
        if parent < 0:
            states.append(ROOT)
        elif i in accepted:
            states.append(CONTINUATION if _left_spine(record, i) else ACCEPTED)
        elif parent in accepted:
            states.append(REJECTED)
        else:
            states.append(UNREACHED)
    return states


def _left_spine(record: StepRecord, node: int) -> bool:
    """A non-spine node below a spine node: the path went along the spine, then took a branch."""
    if record.sources[node] in SPINE_SOURCES:
        return False
    parent = record.parents[node]
    while parent > 0:
        if record.sources[parent] in TRUNK_SOURCES:
            return True
        parent = record.parents[parent]
    return False


def provenance(record: StepRecord) -> list[str]:
    """One provenance label per emitted token: the source of its accepted node, or "bonus"."""
    states = node_states(record)
    out = []
    for node in record.accepted[1:]:
        src = record.sources[node]
        if states[node] == CONTINUATION:
            out.append("continuation")
        elif src == ALIGNED_SOURCE:
            out.append("aligned")
        elif src in SPINE_SOURCES:
            out.append("spine")
        elif src in GUESS_SOURCES:
            out.append("guess")
        else:
            out.append("branch")
    out.append("bonus")
    return out[: len(record.emitted)]


def node_styles(record: StepRecord, states: list[str]) -> list[str]:
    """Each node's colour: its state's, except that accepted nodes of an aligned chain have a colour of their own."""
    return [ALIGNED_STYLE if st == ACCEPTED and src == ALIGNED_SOURCE else STYLE[st]
            for st, src in zip(states, record.sources)]


def alignment_line(info: dict) -> str | None:
    """Where the answer stands in the text it is copying (goose's aligned source), in words; None without one."""
    at, left = info.get("aligned_at"), info.get("aligned_left", -1)
    if at is None or (at < 0 and left < 0):
        return None
    moves = f"left it {info.get('departures', 0)}×, came back {info.get('returns', 0)}×"
    if at >= 0:
        return f"following the text at token {at} · {moves}"
    return f"off the text since token {left} (an edit) · {moves}"


def offered_line(info: dict) -> str | None:
    """The chains a proposer was offered this step (vLLM's GooseProposer traces), in words: each source, its
    length and how many of its tokens the engine's output agreed with; None where the step holds none."""
    offered = info.get("offered")
    if not offered:
        return None
    parts = [f"{entry[0]} {entry[1]}" + (f" ({entry[2]} agreed)" if len(entry) > 2 else "") for entry in offered]
    return "offered: " + " · ".join(parts) + (f" · batch {info['batch']}" if "batch" in info else "")


def row_states(rows: dict) -> list[str]:
    """The state of every in-model draft row sent this step: pruned by this step, or kept (grown rows are new
    nodes, listed apart as [parent row, token]; a per-row flag form is read too)."""
    n = len(rows.get("tokens", []))
    grown_in = [g for g in rows.get("grown") or [] if not isinstance(g, (list, tuple))]
    grown, pruned = _flags(grown_in, n), _flags(rows.get("pruned"), n)
    return [PRUNED if pruned[i] else GROWN if grown[i] else KEPT for i in range(n)]


def _flags(value, n: int) -> list[bool]:
    """Flags arrive either as one bool per row or as a list of row indices."""
    if not value:
        return [False] * n
    if len(value) == n and all(isinstance(v, bool) for v in value):
        return list(value)
    picked = {int(v) for v in value if not isinstance(v, bool)}
    return [i in picked for i in range(n)]
