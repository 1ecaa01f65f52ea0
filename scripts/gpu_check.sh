#!/usr/bin/env bash
# goose on one GPU in at most 8 minutes, no network: logits and greedy identity on CUDA (fp32, bf16), doctor's
# cost curve on a random Llama-3-8B-shaped model, a small bench, and the static-shapes option. One summary table;
# JSON to $OUT/gpu_check.json when OUT is set. `--cpu` runs the same steps on CPU with tiny models.
#
#   scripts/gpu_check.sh [--cpu] [--model PATH] [--json FILE] [--skip STEPS] [--wheels DIR]
#
# --wheels DIR installs the wheels in DIR (pure-Python packages this machine lacks, e.g. gguf for --model
# FILE.gguf) into a private folder for this run only; nothing is downloaded.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
py="${PYTHON:-}"
if [[ -z "$py" ]]; then
  if [[ -x "$root/.venv/bin/python" ]]; then py="$root/.venv/bin/python"; else py="$(command -v python3 || command -v python)"; fi
fi
args=()
extra=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --wheels)
      [[ $# -ge 2 && -d "$2" ]] || { echo "gpu_check: --wheels needs a folder of .whl files." >&2; exit 2; }
      extra="$(mktemp -d)"
      "$py" -m pip install -q --no-deps --no-index --target "$extra" "$2"/*.whl
      shift 2 ;;
    --cpu)
      # two threads, passive waits: the check shares small machines with other work
      export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
      args+=("$1"); shift ;;
    *) args+=("$1"); shift ;;
  esac
done
"$py" -c "import torch, transformers" 2>/dev/null || {
  echo "gpu_check: $py cannot import torch and transformers; set PYTHON to an interpreter that has both." >&2; exit 2; }
export PYTHONPATH="$root${extra:+:$extra}${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" "$here/gpu_check.py" "${args[@]}"
