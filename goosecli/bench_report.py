"""What `goose bench` prints: a progress bar with one line per finished run, then the summary tables.

The details table shows whatever speculators report (sources, draft.info, stats) without knowing them.
"""

from __future__ import annotations

from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

INFO_SHOWN = 6  # most info keys per speculator in the details table


class Report:
    def __init__(self, model: str, specs: list[str], greedy: bool):
        self.out = Console(highlight=False)
        self.err = Console(stderr=True, highlight=False)
        for console in (self.out, self.err):
            if not console.is_terminal:  # logs and pipes: do not squeeze tables into 80 columns
                console.width = max(console.width, 140)
        self.model = model
        self.specs = specs
        self.greedy = greedy

    def note(self, text: str) -> None:
        self.err.print(f"[dim]{text}[/dim]")

    def start(self, prompts: int, todo: int, done: int) -> None:
        resumed = f", {done} runs already done" if done else ""
        self.err.print(f"goose bench: {self.model}; {prompts} prompts x {', '.join(self.specs)}; {todo} runs to do{resumed}")

    @contextmanager
    def progress(self, total: int):
        from drafting.bench.results import Skip
        from drafting.machine.curve_watch import take_notices

        bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TimeRemainingColumn(), console=self.err, transient=True,
        )
        with bar:
            task = bar.add_task("warming up", total=total)

            def advance(item) -> None:
                if isinstance(item, Skip):
                    bar.console.print(f"[yellow]note:[/yellow] {item.reason}")
                    bar.advance(task, len(self.specs))
                    return
                bar.console.print(self._run_line(item), soft_wrap=True)
                for line in take_notices():  # e.g. the machine found oversubscribed: said once
                    bar.console.print(f"[yellow]note:[/yellow] {line}", soft_wrap=True)
                bar.update(task, advance=1, description=f"{item['prompt_id']} {item['speculator']}")

            yield advance

    def _run_line(self, r: dict) -> str:
        if r["identical_to_ar"] is None:
            same = "sampled" if not self.greedy else "-"
        elif r["identical_to_ar"]:
            same = "[green]identical[/green]"
        elif r.get("divergence_margin") is not None:
            colour = "yellow" if r.get("exact_up_to_ties") else "red"
            same = f"[{colour}]differs at token {r['first_divergence']} (ar's top-2 margin {r['divergence_margin']:.3f})[/{colour}]"
        else:
            same = f"[red]differs at token {r['first_divergence']}[/red]"
        tps = r["new_tokens"] / r["wall_s"] if r["wall_s"] else 0.0
        return (
            f"{r['prompt_id']} {r['speculator']}: {r['new_tokens']} tok, {r['wall_s']:.2f} s, {tps:.1f} tok/s, "
            f"{r['mean_accepted']:.2f}/step, {same}"
        )

    def tables(self, doc: dict) -> None:
        summary = doc["summary"]
        if not summary:
            self.err.print("no finished runs.")
            return
        for line in (f"[yellow]note:[/yellow] {s['reason']}" for s in doc.get("skipped", [])):
            self.err.print(line)
        weights = f"+{doc['weights']}" if doc.get("weights", "float") != "float" else ""
        title = f"{doc['model']} · {doc['device']} {doc['dtype']}{weights} · {doc['max_new_tokens']} new tokens"
        if not doc.get("complete", True):
            title += " · PARTIAL (interrupted)"
        self.out.print(self._main_table(summary, title, doc.get("device", "")))
        tasks = sorted({t for s in summary.values() for t in s["by_task"]})
        if len(tasks) > 1:
            self.out.print(self._task_table(summary, tasks))
        self.out.print(self._details_table(summary))
        if not self.greedy:
            self.out.print(
                "Sampling: outputs are random, so they are not compared token by token; exactness of the sampled "
                "distribution is proven by the distribution tests."
            )

    def _cells(self, s: dict) -> list[str]:
        speedup = f"{s['speedup']:.2f}x" if s["speedup"] is not None else "-"
        vs_plain = s.get("speedup_vs_plain")
        speedup += f" / {vs_plain:.2f}x" if vs_plain is not None else " / -"
        if not self.greedy:
            same = "sampled"
        elif s["identical"] is None:  # another engine: not compared token by token
            same = "-"
        else:
            same = f"{s['identical']}/{s['prompts']}"
            ties = s.get("exact_up_to_ties", s["identical"])
            if s["identical"] == s["prompts"]:
                same = f"[green]{same}[/green]"
            elif ties == s["prompts"]:
                same = f"[yellow]{same}, {ties}/{s['prompts']} up to ties[/yellow]"
            else:
                same = f"[red]{same}, {ties}/{s['prompts']} up to ties[/red]"
        return [f"{s['tokens_per_s']:.1f}", speedup, f"{s['mean_accepted']:.2f}", same, str(s["prompts"])]

    def _main_table(self, summary: dict, title: str, device: str) -> Table:
        t = Table(title=title)
        plain = next(iter(summary.values())).get("plain_reference", "ar")
        for col in ("speculator", "device", "tokens/s", f"speedup vs ar / vs fastest plain ({plain})", "mean accepted", "identical to ar", "prompts"):
            t.add_column(col, justify="left" if col in ("speculator", "device") else "right")
        t.caption = "fastest plain: the fastest of ar, hf-ar (transformers' own generate()) and llama.cpp (its own loop) in this run"
        for spec, s in summary.items():
            t.add_row(spec, s.get("device") or device, *self._cells(s))  # where each row ran
        return t

    def _task_table(self, summary: dict, tasks: list[str]) -> Table:
        t = Table(title="per task")
        plain = next(iter(summary.values())).get("plain_reference", "ar")
        for col in ("task", "speculator", "tokens/s", f"speedup vs ar / vs fastest plain ({plain})", "mean accepted", "identical to ar", "prompts"):
            t.add_column(col, justify="left" if col in ("task", "speculator") else "right")
        for task in tasks:
            first = True
            for spec, s in summary.items():
                if task in s["by_task"]:
                    t.add_row(task if first else "", spec, *self._cells(s["by_task"][task]))
                    first = False
            t.add_section()
        return t

    def _details_table(self, summary: dict) -> Table:
        t = Table(title="details per speculator")
        for col in ("speculator", "forward ms/pass", "overhead ms/step", "acceptance by source", "step info", "counters"):
            t.add_column(col, justify="right" if "ms" in col else "left")
        for spec, s in summary.items():
            d = s["details"]
            sources = "\n".join(
                f"{src} {c['accepted']}/{c['offered']} ({100 * c['rate']:.0f}%)" for src, c in d["sources"].items()
            ) or "-"
            timed = d["forward_per_step_ms"] is not None  # not for a row that times itself (llama.cpp's own)
            t.add_row(
                spec,
                f"{d['forward_per_step_ms']:.1f}" if timed else "-",
                f"{d['overhead_per_step_ms']:.2f} ({100 * d['overhead_ratio']:.1f}%)" if timed else "-",
                sources,
                _info_text(d["info"]) or "-",
                ", ".join(f"{k} {_num(v)}" for k, v in d["stats"].items()) or "-",
            )
        return t


def _num(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _info_text(info: dict) -> str:
    lines = []
    for key, slot in list(info.items())[:INFO_SHOWN]:
        if "counts" in slot:
            counts = sorted(slot["counts"].items(), key=lambda kv: -kv[1])
            lines.append(f"{key}: " + ", ".join(f"{w} {c}" for w, c in counts[:5]))
        else:
            line = f"{key}: mean {slot['mean']:.3g}"
            traj = slot.get("trajectories")
            if traj:
                line += " (last run " + " ".join(f"{v:.2f}" for v in traj[-1][-6:]) + ")"
            lines.append(line)
    return "\n".join(lines)
