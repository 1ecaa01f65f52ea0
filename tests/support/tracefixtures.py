"""Hand-made step records covering what the views draw: a spine with branches, a spine continuation, a bypass
chain, a plain step, a tree too big to draw, and PTD steps with in-model draft rows and a guess tree.

Both speculators produce the same output text (they are lossless), chunked into different steps.
"""

from __future__ import annotations

from pathlib import Path

from drafting.engine.trace import StepRecord, TraceWriter

WORDS = [
    "def", " add", "(", "a", ",", " b", ")", " ->", " int", ":", "\n", "    ", "return", " a", " +",
    " c", " d", " sum", " main", "self", " x", " y", " z", " print", " is", "\t", " return",
]
ID = {w: i + 100 for i, w in enumerate(WORDS)}
OUTPUT = [" add", "(", "a", ",", " b", ")", " ->", " int", ":", "\n", "    ", "return", " a", " +", " b", "\n"]


class WordTokenizer:
    """Decodes fixture ids to their words, as a real tokenizer would for TraceWriter."""

    def decode(self, ids):
        return "".join(WORDS[i - 100] if 100 <= i < 100 + len(WORDS) else f"<{i}>" for i in ids)


class _Tree:
    def __init__(self, root: str):
        self.tokens, self.parents, self.sources = [ID[root]], [-1], ["root"]

    def chain(self, words, parent: int, source: str) -> list[int]:
        out = []
        for w in words:
            self.tokens.append(ID[w])
            self.parents.append(parent)
            self.sources.append(source)
            parent = len(self.tokens) - 1
            out.append(parent)
        return out


def _top(tree: _Tree, chosen: dict[int, str]) -> list:
    """Top-5 per node; the first entry is the target's choice after that node."""
    out = []
    for i in range(len(tree.tokens)):
        first = ID[chosen.get(i, " x")]
        rest = [ID[w] for w in (" y", " z", " print", " is", " sum") if ID[w] != first][:4]
        out.append([[first, 0.61]] + [[t, round(0.3 / (k + 1), 4)] for k, t in enumerate(rest)])
    return out


def goose_records() -> list[StepRecord]:
    recs = []
    # Step 0: spine from the root, a branch off a spine node, alternatives at the root; spine wins 4 tokens.
    t = _Tree("def")
    spine = t.chain([" add", "(", "a", ",", " c", " d"], 0, "spine")
    t.chain(["self", ","], spine[1], "spine-branch")
    t.chain([" sum", "("], 0, "root-alt")
    t.chain([" main"], 0, "root-alt")
    recs.append(StepRecord(
        step=0, position=0, tokens=t.tokens, parents=t.parents, sources=t.sources,
        accepted=[0] + spine[:4], emitted=[ID[w] for w in OUTPUT[0:5]], draft_s=0.0012, verify_s=0.061,
        info={"route": "spine", "budget": 60, "confidence": 0.6, "ema": 0.5, "bypass": False},
        top=_top(t, {0: " add", spine[0]: "(", spine[1]: "a", spine[2]: ",", spine[3]: " b"}),
    ))
    # Step 1: the path leaves the spine at ")" for a branch and keeps going: a spine continuation.
    t = _Tree(" b")
    spine = t.chain([")", ":", "\n"], 0, "spine")
    branch = t.chain([" ->", " int", ":"], spine[0], "spine-branch")
    t.chain([" is"], spine[0], "spine-branch")
    t.chain([","], 0, "root-alt")
    recs.append(StepRecord(
        step=1, position=5, tokens=t.tokens, parents=t.parents, sources=t.sources,
        accepted=[0, spine[0]] + branch, emitted=[ID[w] for w in OUTPUT[5:10]], draft_s=0.0009, verify_s=0.058,
        info={"route": "spine", "budget": 72, "confidence": 0.7, "ema": 0.65, "bypass": False,
              "spine_continuation": 3},
        top=_top(t, {0: ")", spine[0]: " ->", branch[0]: " int", branch[1]: ":", branch[2]: "\n"}),
    ))
    # Step 2: full confidence: bypass, the whole budget on one chain.
    t = _Tree("\n")
    chain = t.chain(["    ", "return", " a", " +"], 0, "spine")
    recs.append(StepRecord(
        step=2, position=10, tokens=t.tokens, parents=t.parents, sources=t.sources,
        accepted=[0] + chain, emitted=[ID[w] for w in OUTPUT[10:15]], draft_s=0.0004, verify_s=0.052,
        info={"route": "bypass", "budget": 100, "confidence": 1.0, "ema": 0.8, "bypass": True},
    ))
    # Step 3: a tree far too big to draw (root alternatives with chains); nothing accepted, the bonus ends it.
    t = _Tree(" b")
    alts = [" x", " y", " z", " print", " is", " sum", " main", "self", " c", " d", ",", ":", " ->", " int"]
    for i, w in enumerate(alts):
        first = t.chain([w], 0, "root-alt")[0]
        t.chain([alts[(i + 1) % len(alts)], alts[(i + 2) % len(alts)]], first, "spine-branch")
        t.chain([alts[(i + 3) % len(alts)]], first, "spine-branch")
    recs.append(StepRecord(
        step=3, position=15, tokens=t.tokens, parents=t.parents, sources=t.sources,
        accepted=[0], emitted=[ID["\n"]], draft_s=0.0021, verify_s=0.094,
        info={"route": "branches", "budget": 60, "confidence": 0.0, "ema": 0.4, "bypass": False},
        stop="max_new_tokens",
    ))
    return recs


def ptd_records() -> list[StepRecord]:
    recs = []
    def rows(words, parents, depths, grown=(), pruned=()):
        """PTD's row description: parents are row indices (-1 = a slot of the Jacobi chain)."""
        return {"tokens": [ID[w] for w in words], "parents": parents, "depths": depths,
                "offsets": [d for d in depths], "grown": [[p, ID[w]] for p, w in grown], "pruned": list(pruned)}

    plan = [  # (position, accepted guess words, rejected guess siblings, draft rows)
        (0, [" add", "("], [" sum"], rows([" add", "(", "a", " sum", ",", "("], [-1, -1, -1, 0, 2, 3],
                                          [1, 1, 1, 2, 2, 3], grown=[(2, " b"), (-1, ",")], pruned=[3, 5])),
        (3, [",", " b", ")"], [" c"], rows([",", " b", ")", " c"], [-1, -1, -1, 1], [1, 1, 1, 2],
                                           grown=[(2, " ->")], pruned=[3])),
        (7, [" int"], [":"], rows([" int", ":", "\n"], [-1, 0, 1], [1, 2, 3], grown=[(2, "    ")])),
        (9, ["\n", "    ", "return"], [], None),
        (13, [" +", " b"], [" c"], rows([" +", " b", "\n", " c"], [-1, -1, -1, 0], [1, 1, 1, 2], pruned=[3])),
    ]
    for step, (pos, good, bad, rows) in enumerate(plan):
        root = "def" if pos == 0 else OUTPUT[pos - 1]
        t = _Tree(root)
        path = t.chain(good, 0, "ptd-guess")
        for w in bad:
            t.chain([w], path[-2] if len(path) > 1 else 0, "pool")
        emitted = OUTPUT[pos : pos + len(good) + 1]
        recs.append(StepRecord(
            step=step, position=pos, tokens=t.tokens, parents=t.parents, sources=t.sources,
            accepted=[0] + path, emitted=[ID[w] for w in emitted], draft_s=0.0006, verify_s=0.071,
            rows=rows, info={"route": "ptd", "pool_keys": 12 + step},
            stop="max_new_tokens" if pos + len(emitted) >= len(OUTPUT) else None,
            top=_top(t, {}),
        ))
    return recs


def write_fixture_traces(folder: Path) -> tuple[Path, Path]:
    """One goose and one ptd trace for the same prompt, as `goose bench --trace` lays them out."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, records in (("goose", goose_records()), ("ptd", ptd_records())):
        path = folder / f"p1__{name}.jsonl"
        with TraceWriter(path, {"speculator": name, "prompt_id": "p1", "model": "fixture"},
                         tokenizer=WordTokenizer()) as w:
            for r in records:
                w.write(r)
        out.append(path)
    return out[0], out[1]
