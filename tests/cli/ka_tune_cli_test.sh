#!/usr/bin/env bash
# Drives the real ka-tune binary.
# Usage: ka_tune_cli_test.sh CASE KA_TUNE SQLITE3 [SUITE_FIXTURES [KA_BENCH MODELS_DIR]]
set -u
case_name=$1
ka_tune=$2
sqlite3=$3
suite_fixtures=${4:-}
ka_bench=${5:-}
models_dir=${6:-}
source "$(dirname "$0")/cli_common.sh"
# Quick timing: these tests check behaviour, not speed.
quick=(--config-budget 0.02 --finalists 2 -q)

case "$case_name" in
  model)
    # Every (operator, shape) a GPT-2 block runs on ka's kernels is tuned, its fusion decision
    # measured, and ka-bench's run of the same model takes every GEMM's config from the table.
    "$ka_tune" --model "$models_dir/gpt2_block.pt" --input x:1x8x768 --strategy random --budget 2 \
      --threads 2 --db "$tmp/ka.db" "${quick[@]}" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc"
    grep -q "^  --op aten::addmm --shapes 8x768x2304:t " "$tmp/out" || fail "the qkv projection is not listed"
    grep -q "^  --op aten::bmm --shapes 12x8x8x64:t " "$tmp/out" || fail "attention's probs @ v is not listed"
    grep -q "^  --op aten::_softmax --shapes 1x12x8x8 " "$tmp/out" || fail "the attention softmax is not listed"
    grep -q "^  skipped: aten::mul.Scalar .*ka-tune does not tune aten::mul.Scalar" "$tmp/out" || fail "skipped tasks are not said"
    grep -qE "^8x3072x768:t +gemm_f32_blocked" "$tmp/out" || fail "no tuning line for the MLP's second GEMM"
    grep -q "^gpt2_block .* fused::gemm_epilogue\[aten::linear+aten::gelu\]" "$tmp/out" || fail "no fusion decision"
    n=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM recommendations WHERE op='aten::addmm'")
    [ "$n" = "4" ] || fail "expected 4 addmm recommendations, got $n"
    "$ka_bench" --model "$models_dir/gpt2_block.pt" --input x:1x8x768 --tuned-table "$tmp/ka.db" \
      --explain --threads 2 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "ka-bench --tuned-table: exit $rc"
    gemms=$(sed -n '/^  ka_unfused:/,$p' "$tmp/out" | grep -c "kernel gemm_f32_blocked .*shape key aten::addmm(")
    exact=$(sed -n '/^  ka_unfused:/,$p' "$tmp/out" | grep "kernel gemm_f32_blocked .*shape key aten::addmm(" | grep -c "provenance exact")
    [ "$gemms" = "4" ] && [ "$exact" = "4" ] || fail "unfused: $exact of $gemms linear GEMMs took the tuned config"
    ;;
  tune_and_summary)
    "$ka_tune" --op aten::addmm --shapes 16x32x48,1x64x128 --strategy random --budget 5 --db "$tmp/ka.db" "${quick[@]}" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc"
    grep -qE "^16x32x48 +gemm_f32_blocked" "$tmp/out" || fail "no line for 16x32x48"
    grep -qE "^1x64x128 +gemm_f32_blocked" "$tmp/out" || fail "no line for 1x64x128"
    n=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM trials")
    [ "$n" = "10" ] || fail "expected 10 trials, got $n"
    n=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM recommendations")
    [ "$n" = "2" ] || fail "expected 2 recommendations, got $n"
    ;;
  resume_after_kill)
    # A sweep killed with SIGKILL mid-run continues where it stopped: no trial lost or repeated.
    # KA_TEST_STOP_AFTER_TRIALS=5 makes ka-tune stop itself (SIGSTOP) right after its 5th
    # stored trial, so the kill lands there on any machine, however fast.
    # The expectation is an uninterrupted sweep's trials: how many of the budget's configs are
    # distinct (not equivalent to one measured already) depends on the host's ISA path.
    sweep=(--op aten::addmm --shapes 48x64x80 --strategy exhaustive --config-budget 0.02 -q)
    "$ka_tune" "${sweep[@]}" --budget 65 --db "$tmp/ref.db" >"$tmp/out" 2>"$tmp/err" || fail "uninterrupted sweep failed"
    args=("${sweep[@]}" --budget 60 --db "$tmp/ka.db")
    KA_TEST_STOP_AFTER_TRIALS=5 "$ka_tune" "${args[@]}" >"$tmp/out" 2>"$tmp/err" &
    pid=$!
    stopped=""
    wait_until_stopped $pid && stopped=1
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    [ -n "$stopped" ] || fail "ka-tune never stopped after 5 trials: $(cat "$tmp/err")"
    before=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM trials")
    [ "$before" = 5 ] || fail "killed run stored $before trials (expected 5)"
    status=$("$sqlite3" "$tmp/ka.db" "SELECT status FROM runs")
    [ "$status" = "running" ] || fail "killed run's status: $status"
    "$ka_tune" "${args[@]}" >"$tmp/out" 2>"$tmp/err" || fail "resumed run failed"
    grep -qE "\+${before} / " "$tmp/out" || fail "resumed run did not reuse the $before stored trials"
    total=$("$sqlite3" "$tmp/ka.db" "SELECT count(*), count(DISTINCT config) FROM trials")
    [ "${total#*|}" = "${total%|*}" ] || fail "a configuration was measured twice: $total trials (all, distinct)"
    # The 5 reused trials are not charged: the resumed run measures up to 60 more, the
    # configurations an uninterrupted sweep with a budget of 65 measures.
    configs() { "$sqlite3" "$1" "SELECT config FROM trials" | sort; }
    [ "$(configs "$tmp/ka.db")" = "$(configs "$tmp/ref.db")" ] ||
      fail "trials after resume: ${total%|*}, not the $(configs "$tmp/ref.db" | wc -l) of an uninterrupted sweep"
    ;;
  shared_sweep)
    # Two ka-tunes sweeping the same work on one database measure each configuration once
    # (Note [Shared trials]). The first stops itself after its 3rd trial; the second starts,
    # and once it has stored a trial of its own the first continues: from then on both sweep
    # the same points in the same order at once, each taking what the other measured.
    # How many configurations one run alone measures within the budget depends on the host's
    # ISA path (how many are distinct): an uninterrupted run says.
    sweep=(--op aten::addmm --shapes 48x64x80 --strategy exhaustive --budget 60 --config-budget 0.05 --finalists 2 -q)
    "$ka_tune" "${sweep[@]}" --db "$tmp/ref.db" >"$tmp/out" 2>"$tmp/err" || fail "a lone sweep failed"
    alone=$("$sqlite3" "$tmp/ref.db" "SELECT count(*) FROM trials")
    args=("${sweep[@]}" --db "$tmp/ka.db")
    KA_TEST_STOP_AFTER_TRIALS=3 "$ka_tune" "${args[@]}" >"$tmp/a.out" 2>"$tmp/a.err" &
    a=$!
    wait_until_stopped $a || fail "first ka-tune never stopped after 3 trials: $(cat "$tmp/a.err")"
    "$ka_tune" "${args[@]}" >"$tmp/b.out" 2>"$tmp/b.err" &
    b=$!
    for _ in $(seq 1 1200); do
      n=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM trials" 2>/dev/null)
      [ "${n:-0}" -gt 3 ] && break
      kill -0 $b 2>/dev/null || break
      sleep 0.05
    done
    kill -CONT $a
    wait $a || fail "first ka-tune failed: $(cat "$tmp/a.err")"
    wait $b || fail "second ka-tune failed: $(cat "$tmp/b.err")"
    counts=$("$sqlite3" "$tmp/ka.db" "SELECT count(*), count(DISTINCT config) FROM trials")
    total=${counts%|*}
    [ "${counts#*|}" = "$total" ] || fail "a configuration was measured twice: $counts trials (all, distinct)"
    [ "$total" -ge "$alone" ] || fail "only $total trials stored (one run alone: $alone)"
    statuses=$("$sqlite3" "$tmp/ka.db" "SELECT group_concat(status) FROM runs")
    [ "$statuses" = "complete,complete" ] || fail "run statuses: $statuses"
    grep -qE '[0-9]+ shared' "$tmp/a.out" || fail "the first run took none of the second's trials: $(cat "$tmp/a.out")"
    # The finals too are timed once: by whichever run reached them first; the other takes its
    # recommendation.
    [ "$(cat "$tmp/a.out" "$tmp/b.out" | grep -c "(finals of run [12])")" = 1 ] || fail "the finals were not shared: $(cat "$tmp/a.out" "$tmp/b.out")"
    claims=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM trial_claims")
    [ "$claims" = 0 ] || fail "$claims claims left after both runs ended"
    recs=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM recommendations")
    [ "$recs" = 1 ] || fail "expected one recommendation, got $recs"
    ;;
  signals)
    # SIGTERM, SIGINT or SIGHUP stops the sweep after the trial under way: what finished is
    # stored, the run is marked failed and ka-tune exits with 128 + the signal. The signal is
    # sent while ka-tune is stopped after its 3rd trial (KA_TEST_STOP_AFTER_TRIALS), so it
    # lands at a known point on any machine.
    for sig in TERM INT HUP; do
      rm -f "$tmp"/sig.db*
      args=(--op aten::addmm --shapes 48x64x80 --strategy exhaustive --budget 60 --db "$tmp/sig.db" --config-budget 0.02 -q)
      KA_TEST_STOP_AFTER_TRIALS=3 "$ka_tune" "${args[@]}" >"$tmp/out" 2>"$tmp/err" &
      pid=$!
      wait_until_stopped $pid
      kill -s "$sig" $pid
      kill -s CONT $pid
      wait $pid
      rc=$?
      expected=$((128 + $(kill -l "$sig")))
      [ $rc -eq $expected ] || fail "SIG$sig: exit $rc (expected $expected): $(cat "$tmp/err")"
      grep -q "interrupted by signal" "$tmp/err" || fail "SIG$sig: no message: $(cat "$tmp/err")"
      status=$("$sqlite3" "$tmp/sig.db" "SELECT status FROM runs")
      [ "$status" = "failed" ] || fail "SIG$sig: run status $status (expected failed)"
      n=$("$sqlite3" "$tmp/sig.db" "SELECT count(*) FROM trials")
      [ "$n" = 3 ] || fail "SIG$sig: $n trials stored (expected the 3 finished)"
    done
    ;;
  replay)
    "$ka_tune" --op aten::mm --shapes 8x16x24 --strategy exhaustive --db "$tmp/ka.db" --config-budget 0.005 --finalists 2 -q >"$tmp/out" 2>"$tmp/err" || fail "exhaustive sweep failed"
    "$ka_tune" --replay --strategy model --db "$tmp/ka.db" >"$tmp/out" 2>"$tmp/err" || fail "replay failed"
    grep -q "median over 1 shapes" "$tmp/out" || fail "no replay summary"
    first=$(cat "$tmp/out")
    "$ka_tune" --replay --strategy model --db "$tmp/ka.db" >"$tmp/out" 2>"$tmp/err"
    [ "$first" = "$(cat "$tmp/out")" ] || fail "replay is not deterministic"
    ;;
  fusion)
    "$ka_tune" --suite "$suite_fixtures/fused_tiny.yaml" --fusion --config-budget 0.05 --db "$tmp/ka.db" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc"
    grep -q "fused::" "$tmp/out" || fail "no fused pattern in the table"
    n=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM recommendations WHERE op LIKE 'fused::%' AND fusion IN ('fused', 'unfused')")
    [ "$n" -ge 1 ] || fail "no fusion decision stored"
    ;;
  fusion_sweep)
    # Attention's kernel exists only fused: --fusion sweeps its space inside the graph and
    # stores the config it keeps with the decision (Note [Sweeping a fused kernel]).
    "$ka_tune" --suite "$suite_fixtures/attention_tiny.yaml" --fusion --config-budget 0.02 --db "$tmp/ka.db" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc: $(cat "$tmp/err")"
    grep -qE "fused::attention: swept [0-9]+ configs of attention_f32_cpu in the graph; kept .*block_q=" "$tmp/out" || fail "no sweep line: $(cat "$tmp/out")"
    # The decision is this machine's measurement (fused, fused? or unfused); the row keeps it.
    decision=$(sed -nE 's/^attention .*[0-9]x +(unfused|fused).*/\1/p' "$tmp/out")
    [ "$decision" = "fused" ] || [ "$decision" = "unfused" ] || fail "no decision: $(cat "$tmp/out")"
    row=$("$sqlite3" "$tmp/ka.db" "SELECT kernel, fusion FROM recommendations WHERE op = 'fused::attention' AND config LIKE '%block_k=%block_q=%'")
    [ "$row" = "attention_f32_cpu|$decision" ] || fail "attention row: '$row', decision $decision"
    # ka-bench with the tuned table follows it: attention with the stored config (provenance
    # exact), or its ops one by one.
    "$ka_bench" --suite "$suite_fixtures/attention_tiny.yaml" --explain --tuned-table "$tmp/ka.db" >"$tmp/out" 2>"$tmp/err" || fail "ka-bench --tuned-table: exit $?"
    if [ "$decision" = "fused" ]; then
      grep -A1 "fused::attention\[" "$tmp/out" | grep -q "provenance exact" || fail "the tuned attention config was not used: $(cat "$tmp/out")"
    else
      grep -q "fused::attention\[" "$tmp/out" && fail "attention ran fused against the table's decision: $(cat "$tmp/out")"
      grep -q "aten::_softmax .*not fused: the tuned table measured fused::attention as slower" "$tmp/out" || fail "--explain does not name the table's decision: $(cat "$tmp/out")"
    fi
    ;;
  threads)
    # --threads 1: every trial and the recommendation run on one thread.
    "$ka_tune" --op aten::addmm --shapes 96x64x160 --strategy random --budget 8 --threads 1 --db "$tmp/ka.db" "${quick[@]}" >"$tmp/out" 2>"$tmp/err" || fail "exit $?"
    n=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM trials WHERE config LIKE '%threads=1 %'")
    [ "$n" = "8" ] || fail "expected 8 one-thread trials, got $n: $("$sqlite3" "$tmp/ka.db" "SELECT config FROM trials")"
    n=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM recommendations WHERE config LIKE '%threads=1 %'")
    [ "$n" = "1" ] || fail "the recommendation is not a one-thread config: $("$sqlite3" "$tmp/ka.db" "SELECT config FROM recommendations")"
    "$ka_tune" --op aten::addmm --shapes 96x64x160 --threads -1 --db "$tmp/ka.db" -q >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "--threads -1: expected exit 2"
    grep -q "^ka-tune: error: --threads: '-1' is not a thread count from 0 (all cores) to " "$tmp/err" || fail "--threads -1 message: $(cat "$tmp/err")"
    ! grep -q "error: ka-tune" "$tmp/err" || fail "the tool's name repeated: $(cat "$tmp/err")"
    ;;
  bad_input)
    "$ka_tune" --op aten::addmm --shapes 12x13 --db "$tmp/ka.db" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "bad shape: expected exit 2"
    grep -q "bad shape '12x13'" "$tmp/err" || fail "bad shape message"
    "$ka_tune" --op aten::addmm --shapes 12x13x14 --strategy psychic --db "$tmp/ka.db" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "bad strategy: expected exit 2"
    grep -q "unknown strategy 'psychic'" "$tmp/err" || fail "bad strategy message"
    "$ka_tune" --help >"$tmp/out" 2>"$tmp/err" || fail "--help failed"
    grep -q "resumes" "$tmp/out" || fail "--help does not explain resuming"
    ;;
  bad_numbers)
    # Every numeric option, the database and the environment are checked before anything runs:
    # exit 2, naming the option (or variable) and the value; nothing is stored.
    tune=("$ka_tune" --op aten::addmm --shapes 8x8x8 --db "$tmp/ka.db" -q)
    expect_fail 2 "ka-tune: error: --budget: '-1' is not a whole number >= 0" "${tune[@]}" --budget -1
    expect_fail 2 "--time-budget: '-5' is not a finite number > 0" "${tune[@]}" --time-budget -5
    expect_fail 2 "--time-budget: 'nan' is not a finite number > 0" "${tune[@]}" --time-budget nan
    expect_fail 2 "--finalists: '-3' is not a whole number >= 1" "${tune[@]}" --finalists -3
    expect_fail 2 "--seed: '-1' is not a whole number >= 0" "${tune[@]}" --seed -1
    expect_fail 2 "--target-ci: '0' is not a finite number > 0" "${tune[@]}" --target-ci 0
    expect_fail 2 "--config-budget: 'inf' is not a finite number > 0" "${tune[@]}" --config-budget inf
    expect_fail 2 "--tolerance: 'nan' is not a finite number >= 0" "${tune[@]}" --tolerance nan
    expect_fail 2 "--threads: '100000' is not a thread count from 0 (all cores) to " "${tune[@]}" --threads 100000
    grep -qE "logical cores, at most 1024\)" "$tmp/err" || fail "--threads: the bound is not explained"
    # Shapes whose tensors cannot fit (or whose sizes overflow) are refused with their size.
    expect_fail 2 "ka-tune: error: shape 400000x400000x400000 of aten::addmm needs " "$ka_tune" --op aten::addmm --shapes 400000x400000x400000 --db "$tmp/ka.db" -q
    grep -q "more than the limit of .*(three quarters of the memory available now)" "$tmp/err" || fail "memory bound: the limit is not named"
    expect_fail 2 "shape 9223372036854775807x2x2x2 of aten::bmm needs 16.0 EiB" "$ka_tune" --op aten::bmm --shapes 9223372036854775807x2x2x2 --db "$tmp/ka.db" -q
    expect_fail 2 "ka-tune: error: --db '': the results go to this database" "$ka_tune" --op aten::addmm --shapes 8x8x8 --db '' -q
    expect_fail 2 "--db ':memory:': the results go to this database" "$ka_tune" --op aten::addmm --shapes 8x8x8 --db :memory: -q
    for bad in 0 -1 abc 100000; do
      expect_fail 2 "ka-tune: error: KA_NUM_THREADS='$bad': expected a whole number of threads from 1 to " env KA_NUM_THREADS=$bad "${tune[@]}"
    done
    expect_fail 2 "ka-tune: error: KA_LOG_LEVEL='bogus': expected one of trace, debug, info, warn, error, critical or off" env KA_LOG_LEVEL=bogus "${tune[@]}"
    [ ! -e "$tmp/ka.db" ] || fail "a refused command created the database"
    ;;
  device_cuda)
    # With a GPU and a CUDA libtorch: a short sweep of ka's CUDA SGEMM, stored under the GPU's
    # fingerprint. Without: exit 1 and the reason, before anything is stored.
    "$ka_tune" --op aten::addmm --shapes 96x64x80 --device cuda --strategy random --budget 3 --db "$tmp/ka.db" "${quick[@]}" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -eq 0 ]; then
      grep -qE "^96x64x80 +gemm_f32_cuda" "$tmp/out" || fail "no line for the CUDA kernel"
      fp=$("$sqlite3" "$tmp/ka.db" "SELECT DISTINCT fingerprint FROM recommendations")
      [[ "$fp" == cuda\|* ]] || fail "recommendation not under a CUDA fingerprint: '$fp'"
    else
      [ $rc -eq 1 ] || fail "no GPU: expected exit 1, got $rc"
      grep -qE "^ka-tune: error: --device cuda: (no CUDA device to tune on|the libtorch ka is linked with has no CUDA)" "$tmp/err" || fail "no reason given: $(cat "$tmp/err")"
      [ ! -s "$tmp/out" ] || fail "printed results without a GPU"
      if [ -f "$tmp/ka.db" ]; then
        n=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM runs")
        [ "$n" = "0" ] || fail "a run was recorded without a GPU"
      fi
    fi
    "$ka_tune" --op aten::addmm --shapes 8x8x8 --device tpu >"$tmp/out" 2>"$tmp/err"
    [ $? -ne 0 ] || fail "--device tpu accepted"
    grep -q "tpu not in {cpu,cuda}" "$tmp/err" || fail "bad --device message"
    ;;
  shards)
    # --shard I/N: the N parts of a command together are exactly its unsharded sweep, with
    # whole shapes dealt out (3 shapes, 2 shards) and with a shape's space sliced (2 shapes,
    # 3 shards: one shape in two slices; aten::mm's equivalent configurations stay together).
    for split in "16x24x8,40x8x16,8x8x8 2" "16x24x8,40x8x16 3"; do
      read -r shapes n <<<"$split"
      args=(--op aten::mm --shapes "$shapes" --strategy exhaustive --config-budget 0.002 --finalists 1 -q)
      rm -f "$tmp"/*.db
      "$ka_tune" "${args[@]}" --db "$tmp/whole.db" >"$tmp/out" 2>"$tmp/err" || fail "unsharded sweep failed"
      for i in $(seq 0 $((n - 1))); do
        "$ka_tune" "${args[@]}" --shard "$i/$n" --db "$tmp/shard-$i.db" >"$tmp/out" 2>"$tmp/err" ||
          fail "shard $i/$n failed"
      done
      set_of() { "$sqlite3" "$1" "SELECT shape_key||' '||config FROM trials" | sort; }
      set_of "$tmp/whole.db" >"$tmp/whole.txt"
      for i in $(seq 0 $((n - 1))); do set_of "$tmp/shard-$i.db"; done | sort >"$tmp/shards.txt"
      [ -s "$tmp/whole.txt" ] || fail "the unsharded sweep stored no trial"
      cmp -s "$tmp/whole.txt" "$tmp/shards.txt" ||
        fail "$n shards of $shapes: $(wc -l <"$tmp/shards.txt") trials, unsharded $(wc -l <"$tmp/whole.txt"): $(diff "$tmp/whole.txt" "$tmp/shards.txt" | head -n 4)"
      for i in $(seq 0 $((n - 1))); do
        r=$("$sqlite3" "$tmp/shard-$i.db" "SELECT count(*) FROM recommendations")
        [ "$r" -ge 1 ] || fail "shard $i/$n recommended nothing"
      done
    done
    # More slices than the space has classes: the empty slices are done at once, not errors.
    "$ka_tune" --op aten::relu --shapes 4096 --strategy exhaustive --config-budget 0.002 -q \
      --shard 199/200 --db "$tmp/empty.db" >"$tmp/out" 2>"$tmp/err" || fail "an empty slice failed"
    grep -q "(empty slice)" "$tmp/out" || fail "an empty slice is not reported as such"
    # The plan: every shape once, the shard asked for marked; the cores of the affinity mask.
    taskset -c 0 "$ka_tune" --op aten::mm --shapes 8x8x8,16x16x16,32x32x32 --plan --shard 1/2 >"$tmp/out" 2>"$tmp/err" ||
      fail "--plan failed"
    grep -q "^shard 1/2: .*<- this process" "$tmp/out" || fail "--plan does not mark shard 1/2"
    [ "$(grep -cE '^  (8x8x8|16x16x16|32x32x32) +whole space' "$tmp/out")" = 3 ] || fail "--plan does not list each shape once"
    grep -q "this process may use 1 " "$tmp/out" || fail "--plan under taskset -c 0 does not count one core"
    [ ! -e ka.db ] || fail "--plan wrote a database"
    expect_fail 2 "--shard '2/2': expected I/N" "$ka_tune" --op aten::mm --shapes 8x8x8 --shard 2/2
    expect_fail 2 "--shard 'x': expected I/N" "$ka_tune" --op aten::mm --shapes 8x8x8 --shard x
    expect_fail 2 "--slurm makes the shards itself" "$ka_tune" --op aten::mm --shapes 8x8x8 --shard 0/2 --slurm 2
    ;;
  campaign_scripts)
    # --slurm --no-submit writes the campaign; its scripts run by hand (as Slurm would run
    # them) shard the work, and the merge refuses while a shard is unfinished, naming it.
    cd "$tmp" || fail "no scratch folder"
    args=(--op aten::relu --shapes 1024,2048,4096 --strategy exhaustive --config-budget 0.002 --finalists 1 -q)
    "$ka_tune" "${args[@]}" --db "$tmp/c.db" --slurm 2 --cpus-per-shard 1 --partition debug --time 5 \
      --sbatch-arg=--account=proj --no-submit >"$tmp/out" 2>"$tmp/err" || fail "--slurm --no-submit failed"
    camp="$tmp/c.db.campaign"
    grep -qF "sbatch --parsable --array=0-1 '$camp/shard.sh'" "$tmp/out" || fail "no array submission printed"
    grep -qF "sbatch --parsable --dependency=afterany:<array> '$camp/merge.sh'" "$tmp/out" || fail "no merge submission printed"
    for line in "#SBATCH --cpus-per-task=1" "#SBATCH --partition=debug" "#SBATCH --time=5" \
                "#SBATCH --account=proj" "#SBATCH --output=$camp/logs/shard-%a.log"; do
      grep -qxF -- "$line" "$camp/shard.sh" || fail "shard.sh lacks '$line'"
    done
    command=$(grep "^'.*/ka-tune' " "$camp/shard.sh")
    grep -q -- "'--slurm'\|'--no-submit'\|'--partition'\|'--cpus-per-shard'\|'--db'\|--sbatch-arg" <<<"$command" &&
      fail "shard.sh passes the campaign's own options to the shards: $command"
    grep -qF -- "'--op' 'aten::relu' '--shapes' '1024,2048,4096'" "$camp/shard.sh" || fail "shard.sh lacks the command"
    SLURM_ARRAY_TASK_ID=0 bash "$camp/shard.sh" >"$tmp/out" 2>"$tmp/err" || fail "shard 0 failed"
    [ -f "$camp/shard-0.done" ] || fail "shard 0 finished without its marker"
    bash "$camp/merge.sh" >"$tmp/out" 2>"$tmp/err" && fail "the merge ran with shard 1 unfinished"
    grep -qF "shard 1/2 did not finish; its log: $camp/logs/shard-1.log" "$tmp/err" || fail "the merge did not name shard 1"
    [ ! -e "$tmp/c.db" ] || fail "a refused merge created the database"
    SLURM_ARRAY_TASK_ID=1 bash "$camp/shard.sh" >"$tmp/out" 2>"$tmp/err" || fail "shard 1 failed"
    bash "$camp/merge.sh" >"$tmp/out" 2>"$tmp/err" || fail "the merge failed: $(cat "$tmp/err")"
    grep -q "device cpu|" "$tmp/out" || fail "the merge did not print the device's table"
    "$ka_tune" "${args[@]}" --db "$tmp/whole.db" >/dev/null 2>&1 || fail "unsharded sweep failed"
    n=$("$sqlite3" "$tmp/c.db" "SELECT count(*) FROM trials")
    w=$("$sqlite3" "$tmp/whole.db" "SELECT count(*) FROM trials")
    [ "$n" = "$w" ] || fail "merged campaign holds $n trials, the unsharded sweep $w"
    r=$("$sqlite3" "$tmp/c.db" "SELECT count(DISTINCT shape_key) FROM recommendations")
    [ "$r" = 3 ] || fail "merged campaign recommends for $r shapes, expected 3"
    bash "$camp/merge.sh" >/dev/null 2>&1 || fail "merging again failed"
    [ "$("$sqlite3" "$tmp/c.db" "SELECT count(*) FROM trials")" = "$n" ] || fail "merging again added trials"
    "$ka_tune" "${args[@]}" --db "$tmp/c.db" --slurm 2 --cpus-per-shard 1 --partition debug --time 5 \
      --sbatch-arg=--account=proj --no-submit >"$tmp/out" 2>"$tmp/err" || fail "resubmitting failed"
    grep -q "nothing to submit" "$tmp/out" || fail "a finished campaign was submitted again"
    expect_fail 2 "holds another campaign" "$ka_tune" --op aten::relu --shapes 1024 --db "$tmp/c.db" --slurm 2 --no-submit
    expect_fail 2 "--sbatch-arg 'account': expected one sbatch option" "$ka_tune" "${args[@]}" --db "$tmp/d.db" --slurm 2 --sbatch-arg account --no-submit
    PATH=/nonexistent "$ka_tune" "${args[@]}" --db "$tmp/e.db" --slurm 2 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && grep -q "sbatch is not on PATH" "$tmp/err" || fail "without sbatch: exit $rc"
    [ ! -e "$tmp/e.db.campaign" ] || fail "without sbatch, a campaign folder was written"
    ;;
  *)
    echo "unknown case $case_name"; exit 2 ;;
esac
echo "PASS [$case_name]"
