#!/usr/bin/env bash
# ka-db report on databases made by the real ka-bench and ka-tune.
#   cli:     the page's marks against counts taken from the database with sqlite3, and errors.
#   browser: headless Chromium opens the page: no console message (script errors), every
#            plot's marks in the DOM it built, and a screenshot that is not blank.
# Usage: ka_db_report_test.sh CASE KA_DB KA_BENCH KA_TUNE SQLITE3 SOURCE_DIR
# Exit 77 (a skip) only when Chromium is missing or cannot start here.
set -u
case_name=$1
ka_db=$2
ka_bench=$3
ka_tune=$4
sqlite3=$5
source_dir=$6
source "$(dirname "$0")/cli_common.sh"
q() { "$sqlite3" "$tmp/ka.db" "$@"; }
skip() { echo "SKIP [$case_name]: $*"; exit 77; }
checker="$source_dir/tests/cli/report_page_check.py"

# Two ka-bench runs of the smoke suite (the second is compared with the first) and two
# sweeps of one shape with different strategies: every section of the page has data.
make_database() {
  for run in 1 2; do
    "$ka_bench" --suite smoke --db "$tmp/ka.db" --repetitions 3 --min-time 0.01 \
      >"$tmp/bench.out" 2>&1 || { cat "$tmp/bench.out"; fail "ka-bench run $run failed"; }
  done
  for strategy in random annealing; do
    "$ka_tune" --op aten::mm --shapes 64x64x64 --strategy "$strategy" --budget 15 \
      --config-budget 0.02 --finalists 2 -q --db "$tmp/ka.db" >"$tmp/tune.out" 2>&1 ||
      { cat "$tmp/tune.out"; fail "ka-tune --strategy $strategy failed"; }
  done
}

report() { # extra ka-db report arguments
  "$ka_db" report --db "$tmp/ka.db" --out "$tmp/report.html" "$@" >"$tmp/out" 2>"$tmp/err" ||
    { cat "$tmp/err"; fail "ka-db report $* failed"; }
}

# Marks each plot must have, from the database (run 2 shown, run 1 its baseline).
expected_marks() {
  echo "roofline-2 $(q "SELECT count(*) FROM results WHERE run_id = 2 AND disposition = 'ok' AND gflops > 0 AND flop > 0 AND min_bytes > 0")"
  echo "speedup-2-libtorch $(q "SELECT count(*) FROM results a JOIN results b ON a.case_name = b.case_name AND b.run_id = 2 AND b.impl = 'libtorch' WHERE a.run_id = 2 AND a.impl = 'ka' AND a.disposition = 'ok' AND b.disposition = 'ok' AND a.median_ns > 0 AND b.median_ns > 0")"
  echo "tuning-0 $(q "SELECT count(DISTINCT run_id) FROM trials")"
  echo "regressions $(q "SELECT count(*) FROM results a JOIN results b ON a.case_name = b.case_name AND a.impl = b.impl AND b.run_id = 2 WHERE a.run_id = 1 AND a.disposition = 'ok' AND b.disposition = 'ok' AND a.median_ns > 0 AND b.median_ns > 0")"
}

check_marks() { # MARKS_FILE (lines "plot count")
  while read -r plot want; do
    got=$(awk -v p="$plot" '$1 == p { print $2 }' "$1")
    [ -n "$got" ] || fail "plot $plot missing from the page"
    [ "$got" = "$want" ] || fail "plot $plot has $got marks, the database says $want"
  done < <(expected_marks)
  heat=$(awk '$1 == "heatmap-0" { print $2 }' "$1")
  ok_trials=$(q "SELECT count(*) FROM trials WHERE disposition = 'ok'")
  [ -n "$heat" ] && [ "$heat" -ge 1 ] && [ "$heat" -le "$ok_trials" ] ||
    fail "heatmap-0 has '${heat}' marks (expected 1..$ok_trials, the ok trials)"
}

case "$case_name" in
  marks)
    make_database
    report --run 2 --baseline 1
    grep -qE "^wrote .*report.html \([0-9.]+ KiB, one self-contained file\): 1 benchmark run\(s\) with 5 case\(s\), 1 tuned shape\(s\), [0-9]+ significant regression\(s\) against run 1$" "$tmp/out" ||
      fail "summary line: $(cat "$tmp/out")"
    python3 "$checker" marks "$tmp/report.html" >"$tmp/marks" || fail "could not read the page"
    check_marks "$tmp/marks"
    grep -q "https\?://[a-z]" <(grep -v "http://www.w3.org/2000/svg" <(grep -o "https\?://[^\"' ]*" "$tmp/report.html")) &&
      fail "the page refers to the network"
    # Tunables named by the user; a second report replaces the first whole.
    report --heatmap-x tile_m --heatmap-y tile_n
    grep -q "Median µs over tile_m and tile_n" "$tmp/report.html" || fail "--heatmap-x/-y not used"
    [ ! -e "$tmp/report.html.tmp" ] || fail "temporary file left behind"
    ;;
  errors)
    make_database
    expect_fail 2 "there is no run 42" "$ka_db" report --db "$tmp/ka.db" --out "$tmp/r.html" --run 42
    expect_fail 2 "there is no baseline run 9" "$ka_db" report --db "$tmp/ka.db" --out "$tmp/r.html" --baseline 9
    expect_fail 1 "nothing.db" "$ka_db" report --db "$tmp/nothing.db" --out "$tmp/r.html"
    expect_fail 2 "is the database being read" "$ka_db" report --db "$tmp/ka.db" --out "$tmp/ka.db"
    [ "$(q "SELECT count(*) FROM runs")" = 4 ] || fail "the database was damaged"
    expect_fail 2 "--heatmap-y" "$ka_db" report --db "$tmp/ka.db" --out "$tmp/r.html" --heatmap-x tile_m
    expect_fail 1 "no/such/dir" "$ka_db" report --db "$tmp/ka.db" --out "$tmp/no/such/dir/r.html"
    printf 'not a database' >"$tmp/junk.db"
    expect_fail 1 "junk.db" "$ka_db" report --db "$tmp/junk.db" --out "$tmp/r.html"
    [ ! -e "$tmp/r.html" ] || fail "a failed report left a file"
    ;;
  browser)
    command -v chromium >/dev/null || skip "chromium is not installed (scripts/install-deps.sh installs it)"
    make_database
    report --run 2 --baseline 1
    browser=(chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run
             --user-data-dir="$tmp/profile" --enable-logging=stderr --v=0)
    timeout 120 "${browser[@]}" --dump-dom "file://$tmp/report.html" >"$tmp/dom.html" 2>"$tmp/browser.err"
    if [ ! -s "$tmp/dom.html" ]; then
      timeout 60 "${browser[@]}" --dump-dom "data:text/html,<p>ok</p>" >"$tmp/probe" 2>&1
      grep -q "<p>ok</p>" "$tmp/probe" || skip "chromium cannot start here: $(tail -2 "$tmp/probe")"
      cat "$tmp/browser.err"
      fail "chromium starts but produced no DOM for the report"
    fi
    # Console messages (script errors among them) are logged as CONSOLE lines.
    if grep -q "CONSOLE" "$tmp/browser.err"; then
      grep "CONSOLE" "$tmp/browser.err"
      fail "the page logged to the console"
    fi
    grep -q "aria-sort\|<table class=\"sortable\"" "$tmp/dom.html" || fail "no sortable table in the DOM"
    python3 "$checker" marks "$tmp/dom.html" >"$tmp/marks" || fail "could not read the DOM"
    check_marks "$tmp/marks"
    timeout 120 "${browser[@]}" --window-size=1200,2400 --screenshot="$tmp/shot.png" \
      "file://$tmp/report.html" >"$tmp/shot.out" 2>&1 || { cat "$tmp/shot.out"; fail "no screenshot"; }
    python3 "$checker" not-blank "$tmp/shot.png" || fail "the screenshot is blank"
    ;;
  *)
    echo "unknown case $case_name"; exit 2 ;;
esac
echo "PASS [$case_name]"
