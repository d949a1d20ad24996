#!/usr/bin/env bash
# Drives the real ka-db binary on databases made by the real ka-tune.
# Usage: ka_db_cli_test.sh CASE KA_DB KA_TUNE SQLITE3 SOURCE_DIR CXX
set -u
case_name=$1
ka_db=$2
ka_tune=$3
sqlite3=$4
source_dir=$5
cxx=$6
source "$(dirname "$0")/cli_common.sh"
# A small database with one recommendation per shape, quickly (behaviour, not speed).
tune() { # DB SHAPES SEED
  "$ka_tune" --op aten::addmm --shapes "$2" --strategy random --budget 5 --seed "$3" \
    --config-budget 0.02 --finalists 2 -q --db "$1" >"$tmp/tune.out" 2>"$tmp/tune.err" ||
    { cat "$tmp/tune.err"; fail "ka-tune could not make $1"; }
}
q() { "$sqlite3" "$@"; }

case "$case_name" in
  show)
    tune "$tmp/ka.db" 16x32x48 1
    "$ka_db" show --db "$tmp/ka.db" >"$tmp/out" 2>"$tmp/err" || fail "show failed"
    grep -qE "^runs: 1$" "$tmp/out" || fail "no runs section"
    grep -qE "^ +1 +ka-tune +complete" "$tmp/out" || fail "no run line"
    grep -q "(this machine)" "$tmp/out" || fail "this machine's device not marked"
    grep -qE "aten::addmm +aten::addmm\(f32\[48\]c,f32\[16,32\]c,f32\[32,48\]c\) +gemm_f32_blocked +[0-9]+ +[0-9.]+ [mun]?s +[0-9.]+x" "$tmp/out" || fail "no recommendation line with median and gain"
    grep -qE "^trials: 5 " "$tmp/out" || fail "trial count"
    "$ka_db" show --db "$tmp/ka.db" --trials --op aten::addmm >"$tmp/out" 2>"$tmp/err" || fail "show --trials failed"
    [ "$(grep -c "gemm_f32_blocked" "$tmp/out")" = 5 ] || fail "expected 5 trial lines"
    grep -q "±" "$tmp/out" || fail "trials without CI95"
    "$ka_db" show --db "$tmp/ka.db" --runs >"$tmp/out" 2>"$tmp/err" || fail "show --runs failed"
    grep -q "recommendations" "$tmp/out" && fail "--runs printed more than runs"
    "$ka_db" show --db "$tmp/ka.db" --op aten::addmm >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "--op without --trials: expected exit 2"
    ;;
  export_formats)
    tune "$tmp/ka.db" 16x32x48,1x64x128 1
    "$ka_db" export --db "$tmp/ka.db" --format sqlite --out "$tmp/t.sqlite" >"$tmp/out" 2>"$tmp/err" || fail "sqlite export failed"
    grep -q "exported 2 recommendation(s)" "$tmp/out" || fail "sqlite export summary"
    [ "$(q "$tmp/t.sqlite" "SELECT count(*) FROM recommendations")" = 2 ] || fail "sqlite export rows"
    [ "$(q "$tmp/t.sqlite" "SELECT count(*) FROM trials")" = 0 ] || fail "sqlite export is not table-only"
    "$ka_db" export --db "$tmp/ka.db" --format header --symbol acme::tuned::cpu_table --out "$tmp/t.hpp" >"$tmp/out" 2>"$tmp/err" || fail "header export failed"
    grep -q "cpu_table(std::string_view fingerprint" "$tmp/t.hpp" || fail "header lacks the symbol"
    printf '#include "t.hpp"\nint main() { return static_cast<int>(acme::tuned::cpu_table_size) - 2; }\n' >"$tmp/use.cpp"
    "$cxx" -std=c++17 -fsyntax-only -Wall -Wextra -Werror -I"$source_dir/core/include" -I"$source_dir/db/include" "$tmp/use.cpp" 2>"$tmp/err" || fail "generated header does not compile"
    "$ka_db" export --db "$tmp/ka.db" --format json --out "$tmp/t.json" >"$tmp/out" 2>"$tmp/err" || fail "json export failed"
    if command -v python3 >/dev/null; then
      python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["format"] == "ka.recommendations" and len(d["recommendations"]) == 2, d' "$tmp/t.json" || fail "json does not parse as a 2-row table"
    else
      grep -q '"format": "ka.recommendations"' "$tmp/t.json" || fail "json format"
    fi
    "$ka_db" export --db "$tmp/ka.db" --format json --symbol x::y --out "$tmp/t2.json" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "--symbol with json: expected exit 2"
    "$ka_db" export --db "$tmp/ka.db" --format header --symbol "1bad::name" --out "$tmp/t2.hpp" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "bad --symbol: expected exit 2"
    "$ka_db" export --db "$tmp/ka.db" --format sqlite --fingerprint "cpu|elsewhere" --out "$tmp/t3.sqlite" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 1 ] || fail "export of an absent device: expected exit 1"
    grep -q "it has rows for: 'cpu|" "$tmp/err" || fail "absent device: the devices present are not listed"
    ;;
  import_round_trip)
    tune "$tmp/ka.db" 16x32x48,1x64x128 1
    "$ka_db" export --db "$tmp/ka.db" --format sqlite --out "$tmp/t.sqlite" >"$tmp/out" 2>"$tmp/err" || fail "export failed"
    "$ka_db" import --db "$tmp/new.db" --in "$tmp/t.sqlite" >"$tmp/out" 2>"$tmp/err" || fail "import failed"
    grep -q "imported 2 recommendation(s)" "$tmp/out" || fail "import summary"
    cols="fingerprint, op, shape_key, kernel, kernel_version, config, median_ns, gain_over_default"
    [ "$(q "$tmp/ka.db" "SELECT $cols FROM recommendations ORDER BY shape_key")" = "$(q "$tmp/new.db" "SELECT $cols FROM recommendations ORDER BY shape_key")" ] || fail "round trip changed the rows"
    # A stale kernel version is refused as a whole, naming the mismatch; nothing is written.
    cp "$tmp/t.sqlite" "$tmp/stale.sqlite"
    q "$tmp/stale.sqlite" "UPDATE recommendations SET kernel_version = kernel_version + 100 WHERE id = 1"
    "$ka_db" import --db "$tmp/other.db" --in "$tmp/stale.sqlite" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 1 ] || fail "stale import: expected exit 1"
    grep -q "ka-db: error: .*refusing to import.*version" "$tmp/err" || fail "stale import message"
    [ -e "$tmp/other.db" ] && fail "refused import left a new database behind"
    "$ka_db" import --db "$tmp/new.db" --in "$tmp/stale.sqlite" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 1 ] || fail "stale import into an existing db: expected exit 1"
    [ "$(q "$tmp/new.db" "SELECT count(*) FROM recommendations")" = 2 ] || fail "refused import changed rows"
    ;;
  merge)
    tune "$tmp/a.db" 16x32x48,1x64x128 1
    tune "$tmp/b.db" 16x32x48,8x16x24 2
    "$ka_db" merge --into "$tmp/m.db" "$tmp/a.db" "$tmp/b.db" >"$tmp/out" 2>"$tmp/err" || fail "merge failed"
    grep -qE "recommendations: 3 added, [01] replaced .*, [01] kept" "$tmp/out" || fail "merge counts"
    grep -q "runs: 2 copied" "$tmp/out" || fail "runs not copied"
    [ "$(q "$tmp/m.db" "SELECT count(*) FROM recommendations")" = 3 ] || fail "merged rows"
    # Every trial of both (how many a budget of 5 finds distinct depends on the ISA path).
    trials=$(($(q "$tmp/a.db" "SELECT count(*) FROM trials") + $(q "$tmp/b.db" "SELECT count(*) FROM trials")))
    [ "$trials" -ge 10 ] || fail "the two sweeps stored $trials trials (at least 10 expected)"
    [ "$(q "$tmp/m.db" "SELECT count(*) FROM trials")" = "$trials" ] || fail "merged trials"
    # The 16x32x48 row is the one with the lower median of the two machines.
    best=$(q "$tmp/m.db" "SELECT median_ns FROM recommendations WHERE shape_key LIKE '%f32[16,32]c%'")
    lowest=$( (q "$tmp/a.db" "SELECT median_ns FROM recommendations WHERE shape_key LIKE '%f32[16,32]c%'"; q "$tmp/b.db" "SELECT median_ns FROM recommendations WHERE shape_key LIKE '%f32[16,32]c%'") | sort -g | head -1)
    [ "$best" = "$lowest" ] || fail "merge kept $best, not the lower median $lowest"
    # Again: nothing changes.
    "$ka_db" merge --into "$tmp/m.db" "$tmp/a.db" "$tmp/b.db" >"$tmp/out" 2>"$tmp/err" || fail "second merge failed"
    grep -q "recommendations: 0 added, 0 replaced" "$tmp/out" || fail "second merge changed rows"
    [ "$(q "$tmp/m.db" "SELECT count(*) FROM runs")" = 2 ] || fail "second merge duplicated runs"
    "$ka_db" merge --into "$tmp/a.db" "$tmp/a.db" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "merge into itself: expected exit 2"
    ;;
  diff)
    tune "$tmp/a.db" 16x32x48 1
    # Each trial's CI95 is ±15% of its median (relative, so the test holds however fast the
    # build is, ASan included): a 10% slowdown is within the combined ±21%, a 60% one is a
    # regression.
    # ka-tune may keep the kernel's default config, measured outside `trials`: give every
    # recommendation its trial so that the CI is known.
    q "$tmp/a.db" "INSERT OR REPLACE INTO trials (run_id, op, shape_key, kernel, kernel_version, config, disposition, median_ns, repetitions, created_at) SELECT source_run, op, shape_key, kernel, kernel_version, config, 'ok', median_ns, 10, created_at FROM recommendations"
    cp "$tmp/a.db" "$tmp/noise.db"
    cp "$tmp/a.db" "$tmp/slow.db"
    for db in a noise slow; do q "$tmp/$db.db" "UPDATE trials SET ci95_ns = median_ns * 0.15"; done
    q "$tmp/noise.db" "UPDATE recommendations SET median_ns = median_ns * 1.10"
    q "$tmp/slow.db" "UPDATE recommendations SET median_ns = median_ns * 1.60"
    "$ka_db" diff "$tmp/a.db" "$tmp/noise.db" --fail-on-regression >"$tmp/out" 2>"$tmp/err" || fail "within-noise diff: exit $?"
    grep -q "within noise" "$tmp/out" || fail "10% within the CIs not called noise"
    grep -q "REGRESSION" "$tmp/out" && fail "within-noise change flagged"
    "$ka_db" diff "$tmp/a.db" "$tmp/slow.db" >"$tmp/out" 2>"$tmp/err" || fail "diff without --fail-on-regression: exit $?"
    grep -qE "1\.600 .*REGRESSION" "$tmp/out" || fail "60% slowdown not flagged"
    "$ka_db" diff "$tmp/a.db" "$tmp/slow.db" --fail-on-regression >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 3 ] || fail "--fail-on-regression: expected exit 3"
    # Without CIs the threshold alone decides, and the report says so.
    q "$tmp/noise.db" "UPDATE trials SET ci95_ns = NULL"
    "$ka_db" diff "$tmp/a.db" "$tmp/noise.db" >"$tmp/out" 2>"$tmp/err" || fail "threshold-only diff failed"
    grep -q "REGRESSION (t)" "$tmp/out" || fail "threshold-only regression not marked (t)"
    grep -q "threshold only" "$tmp/out" || fail "threshold-only not explained"
    # Cases in one table only are listed.
    tune "$tmp/c.db" 8x16x24 3
    "$ka_db" diff "$tmp/a.db" "$tmp/c.db" >"$tmp/out" 2>"$tmp/err" || fail "diff with disjoint cases failed"
    grep -q "only in A" "$tmp/out" && grep -q "only in B" "$tmp/out" || fail "one-sided cases not listed"
    ;;
  bad_input)
    "$ka_db" show --db "$tmp/missing.db" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 1 ] || fail "missing db: expected exit 1"
    grep -q "ka-db: error: .*'$tmp/missing.db'.*no such file" "$tmp/err" || fail "missing db not named"
    "$ka_db" merge --into "$tmp/m.db" "$tmp/missing.db" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 1 ] || fail "merge of a missing db: expected exit 1"
    grep -q "missing.db" "$tmp/err" || fail "merge: missing db not named"
    echo "not a database, only some text long enough to look like a header of one" >"$tmp/junk.db"
    "$ka_db" diff "$tmp/junk.db" "$tmp/junk.db" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 1 ] || fail "junk db: expected exit 1"
    grep -q "ka-db: error: .*junk.db" "$tmp/err" || fail "junk db not named"
    "$ka_db" frobnicate >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "bad subcommand: expected exit 2"
    grep -q "ka-db: error: unknown subcommand 'frobnicate'" "$tmp/err" || fail "bad subcommand message"
    "$ka_db" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "no subcommand: expected exit 2"
    "$ka_db" export --db "$tmp/x.db" --format xml --out "$tmp/x" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "bad format: expected exit 2"
    "$ka_db" diff "$tmp/x.db" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "diff with one database: expected exit 2"
    for sub in show export import merge diff; do
      "$ka_db" $sub --help >"$tmp/out" 2>"$tmp/err" || fail "$sub --help failed"
      grep -q "Usage: ka-db $sub" "$tmp/out" || fail "$sub --help has no usage"
    done
    ;;
  export_self)
    # An export never replaces the database it reads, whatever the format and however --out
    # names it (the same path, another path, a hard link): exit 2, both paths named, the
    # database byte for byte as it was.
    tune "$tmp/ka.db" 16x32x48 1
    cp "$tmp/ka.db" "$tmp/before.db"
    ln "$tmp/ka.db" "$tmp/link.db"
    mkdir "$tmp/sub"
    for format in sqlite json header; do
      for out in "$tmp/ka.db" "$tmp/sub/../ka.db" "$tmp/link.db"; do
        expect_fail 2 "ka-db: error: --out '$out' is the database being read (--db '$tmp/ka.db'); write the export to another file" \
          "$ka_db" export --db "$tmp/ka.db" --format $format --out "$out"
        cmp -s "$tmp/ka.db" "$tmp/before.db" || fail "export --format $format --out $out changed the database"
      done
    done
    "$ka_db" export --db "$tmp/ka.db" --format sqlite --out "$tmp/other.sqlite" >"$tmp/out" 2>"$tmp/err" || fail "export to another file failed"
    ;;
  merge_validates)
    # merge checks each row as import does: a row ka could not have written is refused, named
    # with its file and id, and the target is left as it was.
    tune "$tmp/a.db" 16x32x48 1
    tune "$tmp/m.db" 1x64x128 2
    q "$tmp/m.db" .dump >"$tmp/m.before"
    check_refused() { # SQL MESSAGE
      cp "$tmp/a.db" "$tmp/bad.db"
      q "$tmp/bad.db" "$1"
      expect_fail 1 "ka-db: error: $tmp/bad.db: recommendations row " "$ka_db" merge --into "$tmp/m.db" "$tmp/bad.db"
      grep -qF -- "$2" "$tmp/err" || fail "merge after '$1': message lacks '$2': $(cat "$tmp/err")"
      q "$tmp/m.db" .dump | cmp -s - "$tmp/m.before" || fail "a refused merge after '$1' changed the target"
      "$ka_db" import --db "$tmp/i.db" --in "$tmp/bad.db" >"$tmp/out" 2>"$tmp/err"
      [ $? -eq 1 ] || fail "import accepted what merge refused after '$1'"
      grep -qF -- "$2" "$tmp/err" || fail "import after '$1': message lacks '$2'"
    }
    check_refused "UPDATE recommendations SET shape_key = 'garbage'" "bad shape key 'garbage'"
    check_refused "UPDATE recommendations SET median_ns = 'abc'" "median_ns 'abc' is not a finite number > 0"
    check_refused "UPDATE recommendations SET median_ns = -1e308" "median_ns '-1"
    check_refused "UPDATE recommendations SET gain_over_default = 'x'" "gain_over_default 'x' is not a finite number > 0"
    ;;
  bad_numbers)
    # Options, databases that keep nothing and the environment: exit 2 with the reason.
    tune "$tmp/a.db" 16x32x48 1
    expect_fail 2 "--threshold: 'nan' is not a finite number >= 0" "$ka_db" diff "$tmp/a.db" "$tmp/a.db" --threshold nan
    expect_fail 2 "ka-db: error: --db '': the results go to this database" "$ka_db" import --db '' --in "$tmp/a.db"
    expect_fail 2 "ka-db: error: --db ':memory:': the results go to this database" "$ka_db" import --db :memory: --in "$tmp/a.db"
    expect_fail 2 "ka-db: error: --into '': the results go to this database" "$ka_db" merge --into '' "$tmp/a.db"
    expect_fail 2 "ka-db: error: --into ':memory:': the results go to this database" "$ka_db" merge --into :memory: "$tmp/a.db"
    expect_fail 2 "ka-db: error: KA_NUM_THREADS='abc': expected a whole number of threads from 1 to " env KA_NUM_THREADS=abc "$ka_db" show --db "$tmp/a.db"
    expect_fail 2 "ka-db: error: KA_LOG_LEVEL='bogus': expected one of " env KA_LOG_LEVEL=bogus "$ka_db" show --db "$tmp/a.db"
    ;;
  *)
    echo "unknown case $case_name"; exit 2 ;;
esac
echo "PASS [$case_name]"
