#!/usr/bin/env bash
# Measurement quality (issue 5): the same GEMM cases timed by ka-bench twice, and by a plain
# Google Benchmark loop over the same kernel and configuration; prints the medians and ratios.
# Run on a quiet machine after scripts/setup.sh:  scripts/measure-quality.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build/ci}
cases='square_512|bert_ffn_up_512|gpt2_mlp_down_1024|llama7b_qkvo_decode_16'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Median per benchmark in ns from Google Benchmark console output (…_median lines).
medians() {
  awk '/_median/ {
         t = $2; u = $3
         f = (u == "ns") ? 1 : (u == "us") ? 1e3 : (u == "ms") ? 1e6 : (u == "s") ? 1e9 : 0
         name = $1; sub(/_median$/, "", name); printf "%s %.0f\n", name, t * f }' "$1"
}

for run in 1 2; do
  "$build/bin/ka-bench" --suite matmul --no-db --repetitions 5 \
    --benchmark_filter="/($cases)/ka/" >"$tmp/ka$run.txt" 2>/dev/null
done
"$build/bin/ka_gemm_plain_bench" --benchmark_repetitions=5 --benchmark_min_time=0.1 \
  >"$tmp/plain.txt" 2>/dev/null

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
echo "(medians of 5 repetitions, hot cache; ka-bench uses manual time per call, the plain loop"
echo " Google Benchmark's real time; both run the kernel's default configuration)"
