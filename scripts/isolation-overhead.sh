#!/usr/bin/env bash
# What isolated trials cost (Note [Isolated trials]): ka-tune's sweep of the matmul suite's
# aten::mm shapes with 24 configurations per shape (as scripts/tune-matmul.sh), timed with
# trials in worker processes and with --in-process, in alternating rounds so that drift
# favours neither; every run starts from an empty database (--fresh is not enough: the
# finals and the database's growth must match too). Each configuration is timed for its whole
# --config-budget (--target-ci 1e-6 is never reached), so both modes do the same measuring
# work whatever the noise, and the difference between them is what isolation adds: worker
# start, the worker's shape and reference, one message per trial and per finals.
#   [KA_CONFIG_BUDGET=0.2] scripts/isolation-overhead.sh [BUILD_DIR] [ROUNDS] [SHAPES]
# prints each run's wall time and the ratio of the medians (isolated / in-process).
set -euo pipefail
build=${1:-build/ci}
rounds=${2:-3}
shapes=${3:-128x128x128,512x512x512,1x4096x4096,16x4096x4096,512x768x768}
budget=${KA_CONFIG_BUDGET:-0.2}  # seconds per configuration
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # run MODE-FLAG... : prints the wall time in seconds
  rm -f "$tmp"/ka.db*
  local start end
  start=$(date +%s.%N)
  "$build/bin/ka-tune" --op aten::mm --shapes "$shapes" --budget 24 --config-budget "$budget" \
    --target-ci 1e-6 \
    --db "$tmp/ka.db" -q "$@" >/dev/null
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN {printf "%.2f", b - a}'
}
isolated=()
in_process=()
for r in $(seq 1 "$rounds"); do
  isolated+=("$(run)")
  in_process+=("$(run --in-process)")
  echo "round $r: isolated ${isolated[-1]} s, in-process ${in_process[-1]} s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mi=$(median "${isolated[@]}")
mp=$(median "${in_process[@]}")
echo "median of $rounds: isolated $mi s, in-process $mp s, ratio $(awk -v a="$mi" -v b="$mp" 'BEGIN {printf "%.3f", a / b}')"
