#!/usr/bin/env bash
# Measurement quality: the same GEMM cases timed by ka-bench twice, and by a plain
# Google Benchmark loop over the same kernel and configuration; prints the medians and ratios.
# Run on a quiet machine after scripts/setup.sh:
#   scripts/measure-quality.sh [BUILD_DIR] [THREADS] [REPETITIONS]
# (defaults: build/ci, 1 thread — on a shared 2-core VM the second core's neighbours add the
# most noise — and 9 repetitions, the fewest for a Mann-Whitney comparison).
set -euo pipefail
build=${1:-build/ci}
threads=${2:-1}
reps=${3:-9}
cases='square_512|bert_ffn_up_512|gpt2_mlp_down_1024|llama7b_qkvo_decode_16'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# "name median_ns" per benchmark from Google Benchmark's JSON (full precision).
medians() {
  python3 -c '
import json, sys
scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("aggregate_name") == "median":
        name = b["name"][: -len("_median")]
        print(name, b["real_time"] * scale[b["time_unit"]])
' "$1"
}

ka_run() {
  "$build/bin/ka-bench" --suite matmul --no-db --threads "$threads" --repetitions "$reps" \
    --benchmark_filter="/($cases)/ka/" --benchmark_format=json >"$tmp/ka$1.txt" 2>/dev/null
}
# run 1, the plain loop, run 2: the plain loop is compared with the run next to it in time.
ka_run 1
KA_NUM_THREADS=$threads "$build/bin/ka_gemm_plain_bench" --benchmark_repetitions="$reps" \
  --benchmark_min_time=0.1 --benchmark_format=json >"$tmp/plain.txt" 2>/dev/null
ka_run 2

medians "$tmp/ka1.txt" | sort >"$tmp/m1"
medians "$tmp/ka2.txt" | sort >"$tmp/m2"
medians "$tmp/plain.txt" >"$tmp/mp"
printf "%-28s %12s %12s %8s %14s %8s\n" case "run 1 (ms)" "run 2 (ms)" "2 vs 1" "plain GB (ms)" "ka/plain"
i=0
plain_order=(square_512 bert_ffn_up_512 gpt2_mlp_down_1024 llama7b_qkvo_decode_16)
for name in "${plain_order[@]}"; do
  a=$(awk -v n="$name" '$1 ~ "/"n"/ka" {print $2}' "$tmp/m1")
  b=$(awk -v n="$name" '$1 ~ "/"n"/ka" {print $2}' "$tmp/m2")
  p=$(sed -n "$((i + 1))p" "$tmp/mp" | awk '{print $2}')
  awk -v n="$name" -v a="$a" -v b="$b" -v p="$p" 'BEGIN {
    printf "%-28s %12.3f %12.3f %7.1f%% %14.3f %7.1f%%\n", n, a / 1e6, b / 1e6, 100 * (b - a) / a,
           p / 1e6, 100 * (a - p) / p }'
  i=$((i + 1))
done
echo "(medians of $reps repetitions, $threads thread(s), hot cache; ka-bench uses manual time per"
echo " call, the plain loop Google Benchmark's real time; both run the kernel's default"
echo " configuration planned for $threads thread(s))"
