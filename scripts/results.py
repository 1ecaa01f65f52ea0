"""Write a results table (markdown) from one `goose bench --json` file, into a marked block of a document.

    python scripts/results.py RESULTS.json --into README.md --block smollm2 --command "goose bench ..."

The block is the text between `<!-- results:NAME -->` and `<!-- /results:NAME -->`; everything in it is
replaced, so a table in the README is never typed by hand. Speedups are quoted against the fastest plain
decoding of the same run: the fastest of goose's `ar`, transformers' own `generate()` (`hf-ar`) and llama.cpp's own
generation (`llama.cpp`), whichever the run has.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

PLAIN = ("ar", "hf-ar", "llama.cpp")  # plain decoding: goose's, transformers' own, llama.cpp's own


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b else "–"


def table(doc: dict) -> str:
    summary = doc["summary"]
    plain = {name: summary[name]["tokens_per_s"] for name in PLAIN if name in summary}
    if not plain:
        raise SystemExit("results.py: the run has none of `ar`, `hf-ar` and `llama.cpp`, so there is no plain decoding to compare with.")
    fastest_name = max(plain, key=plain.get)
    fastest = plain[fastest_name]
    tasks = list(dict.fromkeys(t for s in summary.values() for t in s.get("by_task", {})))
    head = ["speculator", "tokens/s", f"vs fastest plain ({fastest_name})", "vs `ar`", "tokens/step",
            "identical to `ar`", *tasks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ar_tps = summary.get("ar", {}).get("tokens_per_s", 0.0)
    for name, s in summary.items():
        ident = s.get("identical")
        ties = s.get("exact_up_to_ties")
        if ident is None:
            same = "–"
        elif ties is not None and ties != ident:
            same = f"{ident}/{s['prompts']} ({ties} up to ties)"
        else:
            same = f"{ident}/{s['prompts']}"
        task_cells = []
        for t in tasks:
            mine = s.get("by_task", {}).get(t)
            base = max((summary[p]["by_task"][t]["tokens_per_s"] for p in plain if t in summary[p].get("by_task", {})),
                       default=0.0)
            task_cells.append(_ratio(mine["tokens_per_s"], base) if mine else "–")
        steps = f"{s['mean_accepted']:.2f}" if s.get("steps") else "–"
        lines.append("| " + " | ".join([f"`{name}`", f"{s['tokens_per_s']:.1f}", _ratio(s["tokens_per_s"], fastest),
                                        _ratio(s["tokens_per_s"], ar_tps), steps, same, *task_cells]) + " |")
    return "\n".join(lines)


def vllm_table(doc: dict) -> str:
    """A `scripts.vllm_bench --json` file: each method inside vLLM against vLLM without
    speculation, one table per concurrency, then (with --against) vLLM's plain output against goose bench's `ar`
    and goose's speeds."""
    summary = doc["summary"]
    lines: list[str] = []
    for c in sorted(doc.get("concurrency", [1])):
        # a file written before --concurrency has one request at a time only, at the top of each method
        figures = {name: s["by_concurrency"][str(c)] if "by_concurrency" in s else s for name, s in summary.items()
                   if "by_concurrency" not in s or str(c) in s["by_concurrency"]}
        base = figures.get("none", {}).get("tokens_per_s") or 0.0
        ngram = figures.get("ngram", {}).get("tokens_per_s") or 0.0
        if len(doc.get("concurrency", [1])) > 1:
            lines += ([""] if lines else []) + ["One request at a time:" if c == 1 else f"{c} conversations in flight:", ""]
        lines += ["| vLLM method | tokens/s | vs no speculation | vs vLLM `ngram` | ms per output token | "
                  "mean acceptance length | identical to no speculation |",
                  "|---|---|---|---|---|---|---|"]
        for name, s in figures.items():
            tps = s.get("tokens_per_s") or 0.0
            mal = s.get("mean_acceptance_length")
            tpot = s.get("mean_tpot_s")
            lines.append(f"| `{name}` | {tps:.1f} | {_ratio(tps, base)} | {_ratio(tps, ngram)} | "
                         f"{'–' if tpot is None else f'{1000 * tpot:.1f}'} | "
                         f"{'–' if mal is None else f'{mal:.2f}'} | {s['identical']}/{s['prompts']} |")
    for name, why in (doc.get("skipped") or {}).items():
        lines.append(f"| `{name}` | skipped: {why} | | | | |")
    ref = doc.get("goose")
    if ref:
        speeds = ", ".join(f"`{k}` {v['tokens_per_s']:.1f} tokens/s" for k, v in ref["goose_bench"].items()
                           if v.get("tokens_per_s"))
        lines.append("")
        lines.append(f"vLLM without speculation against `goose bench`'s `ar` on the same prompts: "
                     f"{ref['identical']}/{ref['prompts']} identical. `goose bench` on those prompts (from its own run): {speeds}.")
    return "\n".join(lines)


def caption(doc: dict, command: str) -> str:
    mode = doc.get("dtype", "?") + ("" if doc.get("weights") in (None, "float") else f"+{doc['weights']}")
    if doc.get("engine", "transformers") != "transformers":
        mode = doc.get("mode", doc["engine"])  # llama.cpp and the GGUF's weight type
    prompts = len({r["prompt_id"] for r in doc["runs"]})
    return (f"`{doc.get('model')}`, {doc.get('device')} {mode}, greedy, {doc.get('max_new_tokens')} new tokens per turn, "
            f"{prompts} prompts of `{doc.get('prompt_file')}`; task columns: speedup vs the fastest plain decoding "
            f"on that task's prompts.\n\n```bash\n{command}\n```")


def replace_block(text: str, name: str, body: str) -> str:
    start, end = f"<!-- results:{name} -->", f"<!-- /results:{name} -->"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"results.py: no block {start} ... {end} in the document.")
    return pattern.sub(lambda _: f"{start}\n{body}\n{end}", text)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a goose bench --json file")
    ap.add_argument("--into", type=Path, help="document to update in place (default: print the table)")
    ap.add_argument("--block", default="main", help="name of the marked block to replace")
    ap.add_argument("--command", default="", help="the command that produced the results, shown above the table")
    args = ap.parse_args(argv)
    try:
        doc = json.loads(args.results.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"results.py: cannot read {args.results}: {exc}.")
    if doc.get("complete") is False:
        print(f"results.py: warning: {args.results} is from an unfinished run.", file=sys.stderr)
    if "runs" in doc and doc["runs"] and "method" in doc["runs"][0]:  # a vllm_bench file
        load = ", ".join(str(c) for c in sorted(doc.get("concurrency", [1])))
        body = (f"`{doc.get('model_name', doc.get('model'))}` inside vLLM, greedy, {doc.get('max_new_tokens')} new tokens, "
                f"{'one request at a time' if load == '1' else f'{load} conversations in flight'}, "
                f"{len({r['id'] for r in doc['runs']})} prompts.\n\n```bash\n{args.command}\n```\n\n"
                + vllm_table(doc))
    else:
        body = caption(doc, args.command) + "\n\n" + table(doc)
    if args.into is None:
        print(body)
        return
    args.into.write_text(replace_block(args.into.read_text(encoding="utf-8"), args.block, body), encoding="utf-8")


if __name__ == "__main__":
    main()
