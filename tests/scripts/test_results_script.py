"""scripts/results.py: the README's results tables come from a bench JSON, never typed by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "results.py"


def _entry(tps: float, steps: int, ident: int, tasks: dict[str, float]) -> dict:
    return {"tokens_per_s": tps, "mean_accepted": 2.0 if steps else 0.0, "steps": steps, "identical": ident,
            "exact_up_to_ties": ident, "prompts": 2, "by_task": {t: {"tokens_per_s": v} for t, v in tasks.items()}}


def _doc() -> dict:
    return {"model": "m", "device": "cpu", "dtype": "float32", "weights": "float", "max_new_tokens": 8,
            "prompt_file": "p.jsonl", "complete": True,
            "runs": [{"prompt_id": "a"}, {"prompt_id": "b"}],
            "summary": {"ar": _entry(20.0, 10, 2, {"x": 20.0, "y": 10.0}),
                        "hf-ar": _entry(25.0, 10, 2, {"x": 20.0, "y": 30.0}),
                        "goose": _entry(50.0, 5, 2, {"x": 40.0, "y": 60.0})}}


def test_table_quotes_speedups_against_the_fastest_plain_decoding(tmp_path):
    results = tmp_path / "r.json"
    results.write_text(json.dumps(_doc()))
    readme = tmp_path / "README.md"
    readme.write_text("before\n<!-- results:main -->\nold table\n<!-- /results:main -->\nafter\n")
    subprocess.run([sys.executable, str(SCRIPT), str(results), "--into", str(readme), "--command", "goose bench p.jsonl"],
                   check=True)
    text = readme.read_text()
    assert "old table" not in text and text.startswith("before\n") and text.endswith("after\n")
    goose = next(line for line in text.splitlines() if line.startswith("| `goose`"))
    cells = [c.strip() for c in goose.strip("|").split("|")]
    # 50 / 25 (hf-ar is faster overall), 50 / 20 vs ar; per task against the faster plain row of that task
    assert cells[2:4] == ["2.00×", "2.50×"]
    assert cells[-2:] == ["2.00×", "2.00×"]
    assert "goose bench p.jsonl" in text


def test_missing_block_is_one_sentence(tmp_path):
    results = tmp_path / "r.json"
    results.write_text(json.dumps(_doc()))
    readme = tmp_path / "README.md"
    readme.write_text("no markers\n")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(results), "--into", str(readme)], capture_output=True, text=True)
    assert proc.returncode != 0 and "no block" in proc.stderr and "Traceback" not in proc.stderr


def test_vllm_table_compares_with_no_speculation_and_ngram(tmp_path):
    doc = {"model": "/x/m", "model_name": "m", "max_new_tokens": 8, "complete": True,
           "runs": [{"id": "a", "method": "none"}, {"id": "a", "method": "ngram"}, {"id": "a", "method": "goose"}],
           "skipped": {"suffix": "arctic-inference is not installed"},
           "summary": {"none": {"tokens_per_s": 10.0, "mean_acceptance_length": None, "identical": 1, "prompts": 1},
                       "ngram": {"tokens_per_s": 15.0, "mean_acceptance_length": 2.0, "identical": 1, "prompts": 1},
                       "goose": {"tokens_per_s": 18.0, "mean_acceptance_length": 2.5, "identical": 1, "prompts": 1}},
           "goose": {"identical": 1, "prompts": 1, "goose_bench": {"ar": {"tokens_per_s": 20.0}}}}
    results = tmp_path / "v.json"
    results.write_text(json.dumps(doc))
    out = subprocess.run([sys.executable, str(SCRIPT), str(results)], check=True, capture_output=True, text=True).stdout
    goose = next(line for line in out.splitlines() if line.startswith("| `goose`"))
    assert [c.strip() for c in goose.strip("|").split("|")][2:4] == ["1.80×", "1.20×"]
    assert "skipped: arctic-inference" in out and "1/1 identical" in out
