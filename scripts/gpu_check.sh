#!/usr/bin/env bash
# goose on one GPU in at most 8 minutes, no network: logits and greedy identity on CUDA (fp32, bf16), doctor's
# cost curve on a random Llama-3-8B-shaped model, a small bench, and the static-shapes option. One summary table;
# JSON and a markdown table to $OUT/gpu_check.{json,md} when OUT is set. `--cpu` runs the same steps on CPU with
# tiny models.
#
#   scripts/gpu_check.sh [--cpu] [--model PATH] [--json FILE] [--skip STEPS] [--wheels DIR]
#
# The interpreter: of $PYTHON, the checkout's .venv/bin/python and python3 (in that order), the first whose torch
# sees a CUDA GPU; with --cpu, the first that has torch and transformers. When none sees a GPU it says which
# torch it found where, and exits 2.
#
# --wheels DIR installs the wheels in DIR (pure-Python packages this machine lacks, e.g. gguf for --model
# FILE.gguf) into a private folder for this run only; nothing is downloaded.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"

args=()
wheels=""
cpu=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --wheels)
      [[ $# -ge 2 && -d "$2" ]] || { echo "gpu_check: --wheels needs a folder of .whl files." >&2; exit 2; }
      wheels="$2"; shift 2 ;;
    --cpu)
      cpu=1
      # two threads, passive waits: the check shares small machines with other work
      export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
      args+=("$1"); shift ;;
    *) args+=("$1"); shift ;;
  esac
done

candidates=()
for c in "${PYTHON:-}" "$root/.venv/bin/python" "$(command -v python3 || true)"; do
  [[ -n "$c" ]] || continue
  for seen in "${candidates[@]+"${candidates[@]}"}"; do [[ "$seen" == "$c" ]] && continue 2; done
  candidates+=("$c")
done

# Each candidate answers "<torch version> <1 if CUDA is available, else 0>", or nothing when it cannot import
# torch and transformers (or does not run at all).
probe='import torch, transformers; print(torch.__version__, int(torch.cuda.is_available()))'
py="" found=""
for c in "${candidates[@]+"${candidates[@]}"}"; do
  answer="$("$c" -c "$probe" 2>/dev/null | tail -n 1 || true)"
  read -r version cuda <<<"$answer" || true
  if [[ -z "${version:-}" || ( "${cuda:-}" != 0 && "${cuda:-}" != 1 ) ]]; then
    found+="${found:+, }$c (cannot import torch and transformers)"
    continue
  fi
  found+="${found:+, }$c (torch $version$([[ $cuda == 1 ]] && echo ' with CUDA' || echo ', no CUDA GPU visible'))"
  if [[ $cpu == 1 || $cuda == 1 ]]; then py="$c"; break; fi
done
if [[ -z "$py" ]]; then
  if [[ $cpu == 1 ]]; then
    echo "gpu_check: no interpreter here can import torch and transformers (tried ${found:-nothing}); set PYTHON to one that can." >&2
  else
    echo "gpu_check: no torch here sees a CUDA GPU (tried $found); run with --cpu to check the script itself, or set PYTHON to an interpreter whose torch has CUDA." >&2
  fi
  exit 2
fi

extra=""
if [[ -n "$wheels" ]]; then
  extra="$(mktemp -d)"
  "$py" -m pip install -q --no-deps --no-index --target "$extra" "$wheels"/*.whl
fi
export PYTHONPATH="$root${extra:+:$extra}${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" "$here/gpu_check.py" "${args[@]+"${args[@]}"}"
