#!/usr/bin/env bash
# Hostile database files, concurrent writers and abandoned runs, through the real binaries.
# Usage: ka_db_reliability_cli_test.sh CASE KA_DB KA_TUNE KA_BENCH SQLITE3
set -u
case_name=$1
ka_db=$2
ka_tune=$3
ka_bench=$4
sqlite3=$5
source "$(dirname "$0")/cli_common.sh"
# A small database with one recommendation per shape, quickly (behaviour, not speed).
tune() { # DB SHAPES SEED
  "$ka_tune" --op aten::addmm --shapes "$2" --strategy random --budget 4 --seed "$3" \
    --config-budget 0.02 --finalists 2 -q --db "$1" >"$tmp/tune.out" 2>"$tmp/tune.err" ||
    { cat "$tmp/tune.err"; fail "ka-tune could not make $1"; }
}
q() { "$sqlite3" "$@"; }
# refused FILE WHAT COMMAND...: COMMAND must exit 1 within 60 s naming FILE and WHAT on stderr,
# and leave FILE byte for byte as it was.
refused() {
  local file=$1 what=$2
  shift 2
  cp "$file" "$tmp/before"
  timeout 60 "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ $rc -eq 1 ] || fail "$*: exit $rc, expected 1"
  grep -qF -- "$file" "$tmp/err" || fail "$*: stderr does not name $file"
  grep -qF -- "$what" "$tmp/err" || fail "$*: stderr lacks '$what'"
  cmp -s "$file" "$tmp/before" || fail "$*: changed $file"
}

case "$case_name" in
  hostile_files)
    # Each tool, given a database holding a trigger or a recursive view, refuses it untouched.
    tune "$tmp/good.db" 16x32x48,8x16x16 1
    "$ka_db" export --db "$tmp/good.db" --format sqlite --out "$tmp/good.sqlite" >/dev/null 2>&1 ||
      fail "export of the good database failed"
    cp "$tmp/good.db" "$tmp/trigger.db"
    q "$tmp/trigger.db" "CREATE TRIGGER wipe AFTER INSERT ON trials BEGIN DELETE FROM trials; END;"
    cp "$tmp/good.db" "$tmp/view.db"
    q "$tmp/view.db" "ALTER TABLE recommendations RENAME TO r; CREATE VIEW recommendations AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT x AS id, fingerprint, op, shape_key, kernel, kernel_version, config, fusion, median_ns, gain_over_default, source_run, created_at FROM n, r;"
    # Every tool meets the trigger (which would delete trials on ka's own writes).
    f="$tmp/trigger.db"
    what="holds the trigger 'wipe'"
    refused "$f" "$what" "$ka_tune" --op aten::addmm --shapes 16x32x48 --strategy random --budget 2 --config-budget 0.02 -q --db "$f"
    refused "$f" "$what" "$ka_db" show --db "$f"
    refused "$f" "$what" "$ka_db" export --db "$f" --format json --out "$tmp/x.json"
    refused "$f" "$what" "$ka_db" import --db "$f" --in "$tmp/good.sqlite"
    refused "$f" "$what" "$ka_db" import --db "$tmp/new1.db" --in "$f"
    refused "$f" "$what" "$ka_db" merge --into "$f" "$tmp/good.db"
    refused "$f" "$what" "$ka_db" merge --into "$tmp/new2.db" "$f"
    refused "$f" "$what" "$ka_db" diff "$f" "$tmp/good.db"
    refused "$f" "$what" "$ka_bench" --suite smoke --min-time 0.002 --repetitions 2 --threads 2 --db "$f"
    # The recursive view made every ka-db command and --tuned-table hang.
    f="$tmp/view.db"
    what="holds the view 'recommendations'"
    refused "$f" "$what" "$ka_db" show --db "$f"
    refused "$f" "$what" "$ka_db" diff "$tmp/good.db" "$f"
    refused "$f" "$what" "$ka_bench" --suite smoke --min-time 0.002 --repetitions 2 --threads 2 --no-db --tuned-table "$f"
    refused "$f" "$what" env KA_TUNED_TABLE="$f" "$ka_bench" --suite smoke --min-time 0.002 --repetitions 2 --threads 2 --no-db
    ;;
  parallel_writers)
    # 16 processes start on one new database at once: every one succeeds.
    tune "$tmp/good.db" 16x32x48,8x16x16 1
    "$ka_db" export --db "$tmp/good.db" --format sqlite --out "$tmp/t.sqlite" >/dev/null 2>&1 ||
      fail "export failed"
    pids=()
    for i in $(seq 1 16); do
      "$ka_db" import --db "$tmp/new.db" --in "$tmp/t.sqlite" >"$tmp/out.$i" 2>"$tmp/err.$i" &
      pids+=($!)
    done
    failed=0
    for i in "${!pids[@]}"; do wait "${pids[$i]}" || { failed=$((failed + 1)); cat "$tmp/err.$((i + 1))"; }; done
    [ $failed -eq 0 ] || fail "$failed of 16 concurrent imports into a new database failed"
    [ "$(q "$tmp/new.db" "PRAGMA user_version")" = 6 ] || fail "schema version $(q "$tmp/new.db" "PRAGMA user_version"), expected 6"
    [ "$(q "$tmp/new.db" "SELECT count(*) FROM recommendations")" = 2 ] || fail "rows"
    [ "$(q "$tmp/new.db" "PRAGMA integrity_check")" = ok ] || fail "integrity"
    ;;
  abandoned_run)
    # A ka-tune killed with SIGKILL leaves its run 'running'; the next writer marks it.
    args=(--op aten::addmm --shapes 48x64x80 --strategy exhaustive --budget 6 --db "$tmp/ka.db" --config-budget 0.02 -q)
    KA_TEST_STOP_AFTER_TRIALS=2 "$ka_tune" "${args[@]}" >"$tmp/out" 2>"$tmp/err" &
    pid=$!
    stopped=
    wait_until_stopped $pid && stopped=1
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    [ -n "$stopped" ] || fail "ka-tune never stopped after 2 trials"
    [ "$(q "$tmp/ka.db" "SELECT status FROM runs")" = running ] || fail "killed run not 'running'"
    "$ka_db" show --db "$tmp/ka.db" --runs >"$tmp/out" 2>"$tmp/err" || fail "show failed"
    grep -q " running " "$tmp/out" || fail "show before a writer: the run should still read 'running'"
    "$ka_tune" "${args[@]}" >"$tmp/out" 2>"$tmp/err" || fail "the next ka-tune failed"
    [ "$(q "$tmp/ka.db" "SELECT group_concat(status, ',') FROM (SELECT status FROM runs ORDER BY id)")" = "abandoned,complete" ] ||
      fail "runs after the next writer: $(q "$tmp/ka.db" "SELECT id, status, finished_at FROM runs")"
    "$ka_db" show --db "$tmp/ka.db" --runs >"$tmp/out" 2>"$tmp/err" || fail "show failed"
    grep -q " abandoned " "$tmp/out" || fail "ka-db show does not show 'abandoned'"
    ;;
  *)
    echo "unknown case $case_name"
    exit 2
    ;;
esac
echo "PASS [$case_name]"
