#!/usr/bin/env bash
# Regenerate the results tables: the README's (the edit set on each engine) and docs/results.md's (general prompts),
# one `goose bench` run per model and engine (the llama blocks need `make llamacpp-setup llama-server`, llama-1.5b
# `make qwen-setup` too) and one vllm_bench run (into docs/vllm.md), then each table from its JSON (scripts/results.py). Run it alone on an idle machine: another CPU-heavy process skews every figure.
# An interrupted run resumes where it stopped (--resume); delete results/ to start afresh.
set -euo pipefail
cd "$(dirname "$0")/.."
GOOSE=${GOOSE:-.venv/bin/goose}
PY=${PY:-.venv/bin/python}
PROMPTS=${PROMPTS:-examples/mixed_small.jsonl}
EDITS=${EDITS:-examples/edits.jsonl}
mkdir -p results

table() {  # block name, the file it goes into, the prompt file, the JSON file, then the bench arguments
  local block=$1 into=$2 prompts=$3 json=$4; shift 4
  local cmd="goose bench $prompts $* --json $json"
  echo "== $cmd" >&2
  "$GOOSE" bench "$prompts" "$@" --json "$json" --resume
  "$PY" scripts/results.py "$json" --into "$into" --block "$block" --command "$cmd"
}

run() {  # a general-prompts table of docs/results.md: block name, JSON file, then the bench arguments
  local block=$1 json=$2; shift 2
  table "$block" docs/results.md "$PROMPTS" "$json" "$@"
}

vllm() {  # vLLM's own methods and GooseProposer, checked against the smollm2 run's `ar`
  local args="--max-new-tokens 128 --methods none,ngram,ngram:5,suffix,goose --concurrency 1,4,16 --json results/vllm.json --against results/smollm2.json"
  [ -f results/smollm2.json ] || { echo "results.sh: run 'scripts/results.sh smollm2' first (vllm compares with it)." >&2; exit 2; }
  [ -x .venv-vllm/bin/python ] || { echo "results.sh: run 'make vllm-setup' first." >&2; exit 2; }
  echo "== python -m scripts.vllm_bench $PROMPTS $args" >&2
  # shellcheck disable=SC2086
  VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2} .venv-vllm/bin/python -m scripts.vllm_bench "$PROMPTS" $args
  "$PY" scripts/results.py results/vllm.json --into docs/vllm.md --block vllm \
    --command ".venv-vllm/bin/python -m scripts.vllm_bench $PROMPTS $args"
}

case "${1:-all}" in
  edits|all) table edits README.md "$EDITS" results/edits.json -s hf-ar,hf-pld,pld,pld:aligned=on,goose -n 384 ;;&
  llama-edits|all) table llama-edits README.md "$EDITS" results/llama-edits.json --engine llama.cpp -s ar,pld,pld:aligned=on,goose,llama.cpp,llama.cpp-ngram -n 384 ;;&
  llama-1.5b-edits|all) table llama-1.5b-edits docs/edits.md "$EDITS" results/llama-1.5b-edits.json --engine llama.cpp --model qwen2.5-coder-1.5b --limit 8 -s pld,pld:aligned=on,goose,llama.cpp -n 256 ;;&
  smollm2|all) run smollm2 results/smollm2.json -s hf-ar,pld,hf-pld,goose -n 128 ;;&
  gemma3|all) run gemma3 results/gemma3.json --model gemma3-270m -s hf-ar,pld,tr,iso,goose,lookahead,ptd -n 64 ;;&
  llama|all) run llama results/llama.json --engine llama.cpp -s ar,pld,goose,ptd,llama.cpp,llama.cpp-ngram -n 128 ;;&
  llama-q8|all) run llama-q8 results/llama-q8.json --engine llama.cpp --weights q8_0 -s ar,pld,goose,ptd,llama.cpp,llama.cpp-ngram -n 128 ;;&
  llama-1.5b|all) run llama-1.5b results/llama-1.5b.json --engine llama.cpp --model qwen2.5-coder-1.5b --limit 12 -s ar,pld,goose,ptd,llama.cpp -n 128 ;;&
  vllm|all) vllm ;;
  edits|llama-edits|llama-1.5b-edits|smollm2|gemma3|llama|llama-q8|llama-1.5b) ;;
  *) echo "usage: scripts/results.sh [all|edits|llama-edits|llama-1.5b-edits|smollm2|gemma3|llama|llama-q8|llama-1.5b|vllm]" >&2; exit 2 ;;
esac
