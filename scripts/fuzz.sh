#!/usr/bin/env bash
# Builds the libFuzzer targets (the `fuzz` preset: clang-14, ASan + UBSan) and runs each for a
# bounded time over a seed corpus copied from suites/ and tests/fixtures/. Fails on any crash,
# leak, timeout, out-of-memory or sanitizer report and prints the input that caused it (kept
# under build/fuzz/findings/<target>/; add it to tests/fixtures/fuzz/<target>/ once fixed so
# the ci preset's fuzz_replay.<target> test replays it). See Note [Fuzz targets] in
# fuzz/fuzz_target.hpp.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  default 60; TARGETs default: all (suite ir launch_config shape_key
#   table_import). KA_FUZZ_CORPUS_DIR=<dir> keeps the corpus there across runs (default: a
#   temporary folder removed at exit).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=${1:-60}
[ $# -gt 0 ] && shift
case "$seconds" in
  '' | *[!0-9]*) echo "fuzz: error: SECONDS_PER_TARGET must be a positive integer, got '$seconds'" >&2; exit 2 ;;
esac
[ "$seconds" -gt 0 ] || { echo "fuzz: error: SECONDS_PER_TARGET must be > 0" >&2; exit 2; }
all_targets=(suite ir launch_config shape_key table_import)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")

# Longest input each target is given: a suite or a graph is a page or two; the seed table
# export (two rows, 512-byte pages) is about 10 KiB.
max_len_of() {
  case "$1" in
    suite) echo 8192 ;;
    ir) echo 4096 ;;
    launch_config | shape_key) echo 512 ;;
    table_import) echo 16384 ;;
    *) echo "fuzz: error: unknown target '$1' (known: ${all_targets[*]})" >&2; exit 2 ;;
  esac
}
for t in "${targets[@]}"; do max_len_of "$t" >/dev/null; done

scripts/install-deps.sh
started=$(date +%s)
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz
echo "fuzz: build took $(( $(date +%s) - started )) s"

bin=build/fuzz/bin
findings=build/fuzz/findings
corpus_root=${KA_FUZZ_CORPUS_DIR:-}
if [ -z "$corpus_root" ]; then
  corpus_root=$(mktemp -d "${TMPDIR:-/tmp}/ka-fuzz-corpus.XXXXXX")
  trap 'rm -rf "$corpus_root"' EXIT
fi

# Seeds: the repository's inputs of each kind, plus tests/fixtures/fuzz/<target>/ (hand-written
# seeds and the crashing inputs kept as regression fixtures).
seed_corpus() {
  local t=$1 dir=$2
  mkdir -p "$dir"
  case "$t" in
    suite) cp suites/*.yaml tests/fixtures/suites/*.yaml "$dir"/ ;;
    ir) cp tests/fixtures/graphs/*.ir "$dir"/ ;;
  esac
  cp tests/fixtures/fuzz/"$t"/* "$dir"/
}

# libFuzzer's own options keep it bounded: -timeout per input (a hang is a finding),
# -rss_limit_mb for the whole process, -max_total_time for the run. LSan's suppressions are
# the third-party ones of the asan preset (never ka's code).
export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:check_initialization_order=1
export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

failed=()
for t in "${targets[@]}"; do
  corpus=$corpus_root/$t
  seed_corpus "$t" "$corpus"
  mkdir -p "$findings/$t"
  log=$findings/$t.log
  dict=()
  [ -f fuzz/dicts/$t.dict ] && dict=(-dict=fuzz/dicts/$t.dict)
  rc=0
  # table_import writes a current export into the corpus before reading it (KA_FUZZ_WRITE_SEED).
  KA_FUZZ_WRITE_SEED=$corpus/export.db "$bin/ka_fuzz_$t" "$corpus" "${dict[@]}" \
    -max_total_time="$seconds" -max_len="$(max_len_of "$t")" -timeout=10 -rss_limit_mb=2560 \
    -artifact_prefix="$findings/$t/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  per_s=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  echo "fuzz: $t: ${execs:-?} executions, ${per_s:-?}/s, cov ${cov:-?}, exit $rc"
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$log" >&2
    found=$(ls -t "$findings/$t"/* 2>/dev/null | head -5 || true)
    echo "fuzz: FINDING in $t (log: $log); input(s):" >&2
    echo "${found:-  (libFuzzer wrote no input; see the log)}" >&2
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: error: findings in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} target(s), ${seconds} s each, no finding ($(( $(date +%s) - started )) s in all)"
