#!/usr/bin/env bash
# Drives the real ka-bench binary.
# Usage: ka_bench_cli_test.sh CASE KA_BENCH SQLITE3 SUITE_FIXTURES MODELS_DIR
set -u
case_name=$1
ka_bench=$2
sqlite3=$3
suite_fixtures=$4
models_dir=${5:-}
source "$(dirname "$0")/cli_common.sh"
# Quick timing settings: these tests check behaviour, not speed.
quick=(--min-time 0.002 --repetitions 2 --threads 2)
# expect_exit STATUS ARGS...: runs ka-bench with ARGS into $tmp/out and $tmp/err; fails unless
# it exits with STATUS.
expect_exit() {
  local want=$1
  shift
  "$ka_bench" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ $rc -eq "$want" ] || fail "ka-bench $*: exit $rc, expected $want"
}

case "$case_name" in
  smoke_writes_rows)
    "$ka_bench" --suite smoke --db "$tmp/ka.db" "${quick[@]}" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc, expected 0"
    grep -q "ka-bench summary" "$tmp/out" || fail "no summary table"
    grep -qE "^primes +37 +53 +71 " "$tmp/out" || fail "no row for case 'primes'"
    grep -q "^stored 10 benchmark results in $tmp/ka.db (run 1)" "$tmp/out" || fail "closing line"
    rows=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM results")
    [ "$rows" = "10" ] || fail "expected 10 result rows (5 cases x ka/libtorch), got $rows"
    ok=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM results WHERE disposition='ok' AND median_ns > 0 AND repetitions = 2")
    [ "$ok" = "10" ] || fail "expected 10 ok rows with a median over 2 repetitions, got $ok"
    names=$("$sqlite3" "$tmp/ka.db" "SELECT group_concat(benchmark_name, ' ') FROM (SELECT benchmark_name FROM results WHERE case_name='primes' ORDER BY impl)")
    [ "$names" = "smoke/primes/ka smoke/primes/libtorch" ] || fail "benchmark names: $names"
    cfg=$("$sqlite3" "$tmp/ka.db" "SELECT config FROM results WHERE benchmark_name='smoke/primes/ka'")
    [[ "$cfg" == grid=*block=*tile_k=* ]] || fail "ka config not stored: '$cfg'"
    run=$("$sqlite3" "$tmp/ka.db" "SELECT status, threads, fma_peak_gflops > 0, suite FROM runs")
    [ "$run" = "complete|2|1|smoke" ] || fail "runs row: $run"
    gflops=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM results WHERE case_name='primes' AND gflops > 0 AND pct_peak > 0")
    [ "$gflops" = "2" ] || fail "GFLOP/s and %peak not stored"
    # A second run appends a second run's rows (never overwrites).
    "$ka_bench" --suite smoke --db "$tmp/ka.db" "${quick[@]}" --benchmark_filter=one >"$tmp/out" 2>"$tmp/err" || fail "second run failed"
    runs=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM runs")
    [ "$runs" = "2" ] || fail "expected 2 runs, got $runs"
    rows=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM results")
    [ "$rows" = "12" ] || fail "expected 12 rows after a filtered second run, got $rows"
    ;;
  unknown_suite)
    "$ka_bench" --suite no_such_suite --db "$tmp/ka.db" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "exit $rc, expected 2"
    grep -q "ka-bench: error: unknown suite 'no_such_suite'" "$tmp/err" || fail "message"
    grep -q "smoke" "$tmp/err" || fail "the message should list the available suites"
    [ ! -e "$tmp/ka.db" ] || fail "a database was created for a failed start"
    ;;
  malformed_suite)
    "$ka_bench" --suite "$suite_fixtures/malformed.yaml" --db "$tmp/ka.db" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "exit $rc, expected 2"
    grep -q "malformed.yaml:6: bad value 'four' for 'K'" "$tmp/err" || fail "message must name file and line"
    [ ! -e "$tmp/ka.db" ] || fail "a database was created for a failed start"
    ;;
  unwritable_db)
    "$ka_bench" --suite smoke --db "$tmp/missing/dir/ka.db" "${quick[@]}" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 1 ] || fail "exit $rc, expected 1"
    grep -q "ka-bench: error: cannot open database '$tmp/missing/dir/ka.db'" "$tmp/err" || fail "message"
    [ ! -e "$tmp/missing" ] || fail "something was written"
    grep -q "Benchmark" "$tmp/out" && fail "benchmarks ran although the database was unusable"
    mkdir "$tmp/adir"
    "$ka_bench" --suite smoke --db "$tmp/adir" "${quick[@]}" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 1 ] || fail "directory as --db: exit $rc, expected 1"
    grep -q "ka-bench: error: cannot open database '$tmp/adir'" "$tmp/err" || fail "directory message"
    [ -z "$(ls -A "$tmp/adir")" ] || fail "files were written into the directory"
    ;;
  help)
    "$ka_bench" --help >"$tmp/out" 2>"$tmp/err" || fail "--help exit $?"
    for opt in --suite --db --threads --repetitions --min-time --list-suites --explain --vs --isa; do
      grep -q -- "$opt" "$tmp/out" || fail "--help does not mention $opt"
    done
    "$ka_bench" --list-suites >"$tmp/out" 2>"$tmp/err" || fail "--list-suites exit $?"
    grep -qx "matmul" "$tmp/out" || fail "--list-suites does not list matmul"
    grep -qx "fused" "$tmp/out" || fail "--list-suites does not list fused"
    ;;
  json_format)
    "$ka_bench" --suite smoke --no-db "${quick[@]}" --benchmark_format=json --benchmark_filter='primes' >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc"
    grep -q '"name": "smoke/primes/ka/manual_time"' "$tmp/out" || fail "JSON lacks the ka benchmark"
    grep -q "ka-bench summary" "$tmp/out" && fail "summary must go to stderr when stdout is JSON"
    grep -q "ka-bench summary" "$tmp/err" || fail "summary missing from stderr"
    ;;
  bad_option)
    "$ka_bench" --suite smoke --threads -3 --no-db >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "negative threads: expected exit 2"
    "$ka_bench" --frobnicate >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "unknown option: expected exit 2"
    grep -q "ka-bench: error:" "$tmp/err" || fail "message"
    "$ka_bench" --no-db >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "missing --suite: expected exit 2"
    ;;
  filter_no_match)
    "$ka_bench" --suite smoke --db "$tmp/ka.db" "${quick[@]}" --benchmark_filter=nothing_matches >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "exit $rc, expected 2"
    grep -q "no benchmark matched" "$tmp/err" || fail "message"
    status=$("$sqlite3" "$tmp/ka.db" "SELECT status FROM runs")
    [ "$status" = "failed" ] || fail "a run that measured nothing is '$status', expected failed"
    ;;
  dump_dispatch)
    "$ka_bench" --dump-dispatch aten::addmm >"$tmp/out" 2>"$tmp/err" || fail "exit $?"
    grep -q "^name: aten::addmm$" "$tmp/out" || fail "no registration state"
    grep -q "^schema: aten::addmm(Tensor self, Tensor mat1, Tensor mat2, \*, Scalar beta=1, Scalar alpha=1) -> Tensor" "$tmp/out" || fail "no schema"
    # ka's CPU kernel for every served op is the extract → execute pipeline (runtime/aten_ops.cpp).
    grep -q "^CPU: ka extract+execute (aten::addmm) \[kernel\]$" "$tmp/out" || fail "computed table lacks ka's CPU kernel"
    grep -q "^AutogradCPU: fallthrough " "$tmp/out" || fail "computed table lacks the Autograd fallthrough"
    "$ka_bench" --dump-dispatch aten::nope >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "unknown operator: expected exit 2"
    grep -qE "operator 'aten::nope' is not registered in ka's dispatcher \(ka serves: (aten::[a-z_.A-Z]+, )*aten::addmm, (aten::[a-z_.A-Z]+, )*aten::mm(, aten::[a-z_.A-Z]+)*\)$" "$tmp/err" || fail "message"
    ;;
  interrupt)
    # SIGINT mid-run: what finished is stored, the run is marked failed, exit 130.
    "$ka_bench" --suite matmul --db "$tmp/ka.db" --repetitions 3 --min-time 0.2 >"$tmp/out" 2>"$tmp/err" &
    pid=$!
    for _ in $(seq 1 600); do grep -q "^results:" "$tmp/out" 2>/dev/null && break; sleep 0.1; done
    grep -q "^results:" "$tmp/out" || { kill -9 $pid; fail "ka-bench did not start"; }
    # Signal in the middle of a benchmark's repetitions (the 1024^3 ka benchmark runs for a
    # second or more), the case that must not abort.
    for _ in $(seq 1 600); do grep -q "square_512/libtorch" "$tmp/out" 2>/dev/null && break; sleep 0.1; done
    sleep 0.3
    kill -INT $pid
    for _ in $(seq 1 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    kill -0 $pid 2>/dev/null && { kill -9 $pid; fail "ka-bench did not stop within 60 s of SIGINT"; }
    wait $pid
    rc=$?
    [ $rc -eq 130 ] || fail "exit $rc, expected 130 (128 + SIGINT)"
    grep -q "interrupted by signal 2" "$tmp/err" || fail "no interruption message"
    grep -qE "^stored $("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM results") benchmark results in .*marked failed: interrupted" "$tmp/out" || fail "the closing line must count the rows stored"
    status=$("$sqlite3" "$tmp/ka.db" "SELECT status FROM runs")
    [ "$status" = "failed" ] || fail "run status '$status', expected failed"
    ok=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM results WHERE disposition = 'ok'")
    [ "$ok" -ge 2 ] || fail "expected the finished benchmarks stored, got $ok ok rows"
    total=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM results")
    [ "$total" -lt 42 ] || fail "all 42 benchmarks stored although the run was interrupted"
    bad=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM results WHERE error LIKE 'INTERRUPTED%' AND repetitions = 0")
    [ "$bad" = "0" ] || fail "benchmarks that never ran were stored"
    ;;
  isolate)
    # --isolate / --case-timeout: a case that crashes its process or overruns is stored as
    # 'crashed' / 'timeout' for each of its benchmarks, the rest of the suite runs into the
    # same run, the run is marked failed and the exit status is 1. KA_TEST_CASE_FAULT makes
    # the supervised child raise SIGSEGV in 'primes' and spin in 'tails'.
    KA_TEST_CASE_FAULT=crash:primes,hang:tails "$ka_bench" --suite smoke --db "$tmp/ka.db" "${quick[@]}" --case-timeout 5 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 1 ] || fail "exit $rc, expected 1: $(tail -5 "$tmp/err")"
    runs=$("$sqlite3" "$tmp/ka.db" "SELECT count(*), group_concat(status) FROM runs")
    [ "$runs" = "1|failed" ] || fail "runs: $runs (expected one run, failed)"
    got=$("$sqlite3" "$tmp/ka.db" "SELECT case_name || ':' || impl || ':' || disposition FROM results ORDER BY case_name, impl" | tr '\n' ' ')
    want="empty_k:ka:ok empty_k:libtorch:ok one:ka:ok one:libtorch:ok primes:ka:crashed primes:libtorch:crashed square_64:ka:ok square_64:libtorch:ok tails:ka:timeout tails:libtorch:timeout "
    [ "$got" = "$want" ] || fail "results: $got"
    "$sqlite3" "$tmp/ka.db" "SELECT error FROM results WHERE case_name = 'primes' AND impl = 'ka'" | grep -q "process" || fail "no reason stored for the crash"
    grep -qE "primes +crashed" "$tmp/out" || fail "the lost cases are not listed"
    grep -qE "tails +timeout" "$tmp/out" || fail "the timed-out case is not listed"
    # Without faults, --isolate runs the suite as before: every benchmark ok, exit 0.
    "$ka_bench" --suite smoke --db "$tmp/ok.db" "${quick[@]}" --isolate >"$tmp/out" 2>"$tmp/err" || fail "clean --isolate run failed: $(tail -5 "$tmp/err")"
    ok=$("$sqlite3" "$tmp/ok.db" "SELECT count(*) FROM results WHERE disposition = 'ok'")
    [ "$ok" = 10 ] || fail "clean --isolate run stored $ok ok rows, expected 10"
    ;;
  case_timeout_loop)
    # A real endless case: a graph whose prim::Loop runs 10^9 adds in libtorch's interpreter.
    # --case-timeout stops it, stores 'timeout' for each of its benchmarks, and the next case
    # runs into the same run; the run is marked failed and the exit status is 1.
    start=$(date +%s)
    "$ka_bench" --suite "$suite_fixtures/endless_loop.yaml" --db "$tmp/ka.db" "${quick[@]}" --case-timeout 5 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    took=$(( $(date +%s) - start ))
    [ $rc -eq 1 ] || fail "exit $rc, expected 1: $(tail -5 "$tmp/err")"
    [ $took -lt 120 ] || fail "took $took s: the endless case was not stopped at 5 s"
    got=$("$sqlite3" "$tmp/ka.db" "SELECT case_name || ':' || impl || ':' || disposition FROM results ORDER BY case_name, impl" | tr '\n' ' ')
    want="after:ka:ok after:libtorch:ok endless:ka:timeout endless:ka_unfused:timeout endless:libtorch:timeout "
    [ "$got" = "$want" ] || fail "results: $got"
    [ "$("$sqlite3" "$tmp/ka.db" "SELECT status FROM runs")" = failed ] || fail "the run is not marked failed"
    grep -qE "endless +timeout +stopped after --case-timeout 5 s" "$tmp/out" || fail "the stopped case is not listed"
    ;;
  fused_explain)
    # The shipped fused suite's plans: one checked run per ka variant, nothing timed or stored.
    "$ka_bench" --suite fused --explain --threads 2 --db "$tmp/ka.db" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc, expected 0"
    for c in bert_mlp_512 gpt2_mlp_1024 bert_attn_scores_512 gpt2_attn_scores_1024 bert_residual_ln_512 gpt2_residual_ln_1024; do
      grep -q "^$c: graph " "$tmp/out" || fail "no explanation of case $c"
    done
    grep -q "#1 fused::gemm_epilogue\[aten::linear+aten::gelu\]  nodes \[0, 1\]  fusion: " "$tmp/out" || fail "MLP: no gemm_epilogue group"
    grep -q "fused::pointwise_softmax\[aten::mul.Scalar+aten::add.Tensor+aten::_softmax\]" "$tmp/out" || fail "attention: no softmax prologue group"
    grep -q "fused::pointwise_layer_norm\[aten::add.Tensor+aten::layer_norm\]" "$tmp/out" || fail "no layer_norm prologue group"
    grep -qE "^       kernel gemm_f32_blocked v[0-9]+ on cpu, shape key aten::addmm\(.*\), config grid=.*, provenance heuristic, after -$" "$tmp/out" || fail "no kernel/config/provenance line"
    grep -q ", after #1$" "$tmp/out" || fail "no task dependencies"
    grep -q "^  ka_unfused: 3 task(s); correct" "$tmp/out" || fail "unfused MLP plan"
    grep -q "INCORRECT\|FAILED" "$tmp/out" && fail "a ka variant was not correct"
    grep -q "Benchmark" "$tmp/out" && fail "--explain must not benchmark"
    [ ! -e "$tmp/ka.db" ] || fail "--explain wrote a database"
    # --benchmark_filter selects the cases to explain, as it selects benchmarks.
    "$ka_bench" --suite fused --explain --benchmark_filter=gpt2_mlp >"$tmp/out" 2>"$tmp/err" || fail "filtered --explain exit $?"
    [ "$(grep -c ": graph " "$tmp/out")" = "1" ] || fail "--benchmark_filter=gpt2_mlp explained $(grep -c ": graph " "$tmp/out") cases"
    grep -q "^gpt2_mlp_1024: graph mlp_gelu_tanh " "$tmp/out" || fail "filtered --explain lacks gpt2_mlp_1024"
    "$ka_bench" --suite fused --explain --benchmark_filter=nothing_matches >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "--explain with a filter matching nothing: expected exit 2"
    grep -q "no case matched --benchmark_filter" "$tmp/err" || fail "no-match message"
    # GEMM cases explain their kernel and configuration.
    "$ka_bench" --suite smoke --explain >"$tmp/out" 2>"$tmp/err" || fail "smoke --explain exit $?"
    grep -qE "^  ka: kernel gemm_f32_blocked\[.*\] v[0-9]+, shape key .*, config grid=.*, provenance heuristic; correct" "$tmp/out" || fail "GEMM explanation"
    ;;
  models_explain)
    # The shipped models suite at 128 tokens (and the ResNet block): every case correct, every
    # node accounted for, the nodes ka does not serve on libtorch.
    "$ka_bench" --suite models --explain --threads 2 --benchmark_filter='_128|resnet' >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc, expected 0"
    for c in gpt2_block_128 bert_layer_128 hf_bert_layer_128 hf_gpt2_block_128 llama_block_128 resnet_block_56; do
      grep -q "^$c: model .*\.pt " "$tmp/out" || fail "no explanation of case $c"
    done
    [ "$(grep -c "^  ka: [0-9]* task(s); correct" "$tmp/out")" = "6" ] || fail "not every fused ka variant is correct"
    [ "$(grep -c "^  ka_unfused: [0-9]* task(s); correct" "$tmp/out")" = "6" ] || fail "not every unfused ka variant is correct"
    grep -qE "^    #[0-9]+ aten::split.Tensor  nodes \[[0-9]+\]  on libtorch: ka has no kernel for aten::split.Tensor; metadata only" "$tmp/out" || fail "GPT-2's split is not a metadata fallback"
    grep -qE "^    #[0-9]+ aten::masked_fill.Scalar  nodes \[[0-9]+\]  on libtorch: .*; reads data" "$tmp/out" || fail "masked_fill is not a data fallback"
    grep -A1 -E "^    #[0-9]+ aten::matmul  nodes" "$tmp/out" | grep -qE "^       kernel bmm_f32.* shape key aten::bmm\(f32\[12,128,64\]" || fail "attention's matmul does not run on ka's bmm"
    grep -qE "^    #[0-9]+ aten::conv2d  nodes" "$tmp/out" || grep -qE "^    #[0-9]+ aten::_convolution  nodes" "$tmp/out" || fail "the ResNet block's convolutions are not explained"
    grep -q "fused::gemm_epilogue\[aten::linear+aten::gelu\]" "$tmp/out" || fail "GPT-2's MLP is not fused"
    # Attention fuses in each of its four forms: GPT-2's masked_fill with a mask made from a
    # buffer, BERT's bmm over pre-scaled heads, LLaMA's division and sliced additive mask,
    # Hugging Face BERT's division by a tensor constant.
    grep -q "fused::attention\[aten::matmul+aten::mul.Scalar+aten::masked_fill.Scalar+aten::softmax.int+aten::matmul\]" "$tmp/out" || fail "GPT-2's attention is not fused"
    grep -q "fused::attention\[aten::bmm+aten::softmax.int+aten::bmm\]" "$tmp/out" || fail "BERT's attention is not fused"
    grep -q "fused::attention\[aten::matmul+aten::div.Scalar+aten::add.Tensor+aten::softmax.int+aten::matmul\]" "$tmp/out" || fail "LLaMA's attention is not fused"
    # Hugging Face's BERT, traced: the division by sqrt(head size) is by a 0-dim float64
    # constant (Note [Scale by a 0-dim tensor]).
    grep -q "fused::attention\[aten::matmul+aten::div.Tensor+aten::add.Tensor+aten::softmax.int+aten::matmul\]" "$tmp/out" || fail "Hugging Face BERT's attention is not fused"
    # Hugging Face's GPT-2, traced: the scale and the fill are 0-dim tensors made from sizes
    # while extracting, the mask a torch.where, the probabilities cast by .type(v.dtype); the
    # size arithmetic runs while extracting (Note [Final data while extracting]).
    grep -q "fused::attention\[aten::matmul+aten::div.Tensor+aten::where.self+aten::softmax.int+aten::to.device+aten::matmul\]" "$tmp/out" || fail "Hugging Face GPT-2's attention is not fused"
    grep -qE "^    #[0-9]+ aten::pow.Tensor_Scalar  nodes \[[0-9]+\]  on libtorch: .*; reads only final data: ran during extraction" "$tmp/out" || fail "Hugging Face GPT-2's size arithmetic waited for the tasks before it"
    grep -q "UNSUPPORTED\|INCORRECT\|FAILED" "$tmp/out" && fail "a ka variant was not correct"
    ;;
  model_runs)
    # ka-bench --model: the end-to-end row, then where the time went per operator.
    env -u OMP_WAIT_POLICY "$ka_bench" --model "$models_dir/resnet_block.pt" --input x:1x64x20x20 --db "$tmp/ka.db" "${quick[@]}" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc, expected 0"
    grep -q "^WARNING: OMP_WAIT_POLICY is unset, so libtorch's OpenMP threads spin" "$tmp/out" || fail "no warning about spinning OpenMP threads at 2 threads"
    grep -qE "^resnet_block +resnet_block +\| +[0-9.]+ " "$tmp/out" || fail "no summary row"
    grep -q "^resnet_block: per operator, ka fused, mean of 5 profiled calls" "$tmp/out" || fail "no per-operator table"
    grep -qE "^aten::(conv2d|_convolution) +\[1,64,20,20\],\[64,64,3,3\].* +2 libtorch +[0-9.]+ +[0-9.]+%$" "$tmp/out" || fail "no convolution row"
    grep -qE "^aten::relu +aten::relu\(f32\[1,64,20,20\]c\) +1 ka " "$tmp/out" || fail "no relu row on ka"
    op=$("$sqlite3" "$tmp/ka.db" "SELECT op || ' ' || shape_key FROM results WHERE impl='ka'")
    [ "$op" = "model:resnet_block x=1x64x20x20" ] || fail "stored op and shape key: '$op'"
    ;;
  model_errors)
    # Bad --model arguments are clear errors (exit 2) naming the file, input or shape.
    expect_exit 2 --model "$tmp/none.pt" --input x:1x2
    grep -q "model file '$tmp/none.pt' does not exist" "$tmp/err" || fail "missing file message"
    echo "not a zip archive" >"$tmp/corrupt.pt"
    expect_exit 2 --model "$tmp/corrupt.pt" --input x:1x2
    grep -q "model file '$tmp/corrupt.pt' is not a TorchScript module libtorch can load" "$tmp/err" || fail "corrupt file message"
    expect_exit 2 --model "$models_dir/resnet_block.pt" --input y:1x64x8x8
    grep -q "has no input 'y' (forward takes x: Tensor)" "$tmp/err" || fail "unknown input message"
    expect_exit 2 --model "$models_dir/resnet_block.pt"
    grep -q "no shape for input 'x'" "$tmp/err" || fail "missing input message"
    expect_exit 2 --model "$models_dir/resnet_block.pt" --input x:1xAx8
    grep -q "the shape must be sizes separated by x" "$tmp/err" || fail "bad shape message"
    expect_exit 2 --model "$models_dir/resnet_block.pt" --input x:1x64x8x8 --suite smoke
    grep -q "cannot both be given" "$tmp/err" || fail "--model with --suite"
    # A shape that does not fit the model is an error naming the inputs and libtorch's complaint.
    expect_exit 2 --model "$models_dir/resnet_block.pt" --input x:1x3x8x8 --explain
    grep -q "model '$models_dir/resnet_block.pt' does not run on the inputs given (x:1x3x8x8:float32): libtorch says: RuntimeError: .*channels" "$tmp/err" || fail "a wrong channel count must name the input and say what did not fit"
    # So is a dtype the model cannot take, or token ids past its vocabulary.
    expect_exit 2 --model "$models_dir/token_classifier.pt" --input input_ids:2x16 --input attention_mask:2x16:int64
    grep -q "does not run on the inputs given (input_ids:2x16:float32, attention_mask:2x16:int64).*Long" "$tmp/err" || fail "float ids must name the dtype libtorch wanted"
    expect_exit 2 --model "$models_dir/token_classifier.pt" --input input_ids:2x16:int64:0..5000 --input attention_mask:2x16:int64
    grep -q "index out of range" "$tmp/err" || fail "ids past the vocabulary"
    expect_exit 2 --model "$models_dir/token_classifier.pt" --input input_ids:2x16:int64:9..3 --input attention_mask:2x16:int64
    grep -q "the range of input 'input_ids' is empty: 9 .. 3" "$tmp/err" || fail "empty range"
    expect_exit 2 --model "$models_dir/token_classifier.pt" --input input_ids:2x16:half --input attention_mask:2x16:int64
    grep -q "unknown kind 'half'" "$tmp/err" || fail "unknown dtype"
    expect_exit 2 --model "$models_dir/token_classifier.pt" --input input_ids:2x16:float32:0..9 --input attention_mask:2x16:int64
    grep -q "a range is for integer inputs (int64, int32, int16, int8, uint8)" "$tmp/err" || fail "range of a float input"
    # Other dtypes a model may take are inputs too: a uint8 mask (an int16 one the embedding
    # refuses, by libtorch's word).
    expect_exit 0 --model "$models_dir/token_classifier.pt" --input input_ids:2x16:int32:0..1000 \
      --input attention_mask:2x16:uint8 --explain
    grep -q "inputs input_ids=\[2, 16\]/int32 in \[0, 1000) attention_mask=\[2, 16\]/uint8 in \[0, 2)" "$tmp/out" || fail "int32 and uint8 inputs in the heading"
    grep -qE "^  ka: [0-9]+ task\(s\); correct" "$tmp/out" || fail "a uint8 mask: ka's run is not correct"
    expect_exit 2 --model "$models_dir/token_classifier.pt" --input input_ids:2x16:int16:0..1000 \
      --input attention_mask:2x16:uint8
    grep -q "(input_ids:2x16:int16, attention_mask:2x16:uint8): libtorch says: .*Long, Int" "$tmp/err" || fail "int16 ids must be refused with libtorch's reason"
    ;;
  model_ids_and_dict)
    # Token ids and an integer mask in, a dict and an int out, as a Hugging Face model is
    # called: ka runs it (not the interpreter) and every leaf of the outputs is checked.
    "$ka_bench" --model "$models_dir/token_classifier.pt" --input input_ids:2x16:int64:0..1000 \
      --input attention_mask:2x16:int64 --explain >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc, expected 0"
    grep -q "inputs input_ids=\[2, 16\]/int64 in \[0, 1000) attention_mask=\[2, 16\]/int64 in \[0, 2)" "$tmp/out" || fail "the heading must give the inputs' dtypes and ranges"
    grep -qE "^  ka: [0-9]+ task\(s\); correct" "$tmp/out" || fail "ka's run is not correct"
    grep -q "prim::DictConstruct  nodes \[[0-9]*\]  on libtorch: .*metadata only" "$tmp/out" || fail "the dict must be glue in ka's run, not a reason for the interpreter"
    grep -q "torch::jit interpreter" "$tmp/out" && fail "the graph went to the interpreter"
    OMP_WAIT_POLICY=passive "$ka_bench" --model "$models_dir/token_classifier.pt" --input input_ids:2x16:int64:0..1000 \
      --input attention_mask:2x16:int64 --db "$tmp/ka.db" "${quick[@]}" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "timed run: exit $rc, expected 0"
    grep -q "OMP_WAIT_POLICY is unset" "$tmp/out" && fail "the OpenMP warning with OMP_WAIT_POLICY set"
    op=$("$sqlite3" "$tmp/ka.db" "SELECT op || ' ' || shape_key FROM results WHERE impl='ka'")
    [ "$op" = "model:token_classifier input_ids=2x16:int64,attention_mask=2x16:int64" ] || fail "stored op and shape key: '$op'"
    ;;
  model_optional_args)
    # forward(x, mask: Optional[Tensor] = None, repeat: int = 2, scale: float = 1.0,
    # residual: bool = True): arguments left out take their defaults, values are given as
    # NAME=VALUE, and the ifs and the loop they settle are folded, so ka runs the graph.
    # --explain with the arguments after $2 must give the heading $2 and run on ka, correct,
    # with $1 linear layers in each variant.
    explains_on_ka() {
      local linears=$1 heading=$2
      shift 2
      "$ka_bench" --model "$models_dir/optional_args.pt" "$@" --explain >"$tmp/out" 2>"$tmp/err"
      local rc=$?
      [ $rc -eq 0 ] || fail "$*: exit $rc, expected 0"
      grep -q "$heading" "$tmp/out" || fail "$*: the heading must give the inputs taken"
      grep -qE "^  ka: [0-9]+ task\(s\); correct" "$tmp/out" || fail "$*: ka's run is not correct"
      grep -q "torch::jit interpreter" "$tmp/out" && fail "$*: the graph went to the interpreter"
      [ "$(grep "^    #[0-9]" "$tmp/out" | grep -o "aten::linear" | wc -l)" = $((2 * linears)) ] ||
        fail "$*: $linears linear layers per variant expected"
    }
    explains_on_ka 2 "inputs x=\[4, 32\] mask=None repeat=2 scale=1 residual=True" --input x:4x32
    explains_on_ka 3 "mask=\[4, 32\]/mask repeat=3 scale=2 residual=False" --input x:4x32 \
      --input mask:4x32:mask --input repeat=3 --input scale=2 --input residual=false
    expect_exit 2 --model "$models_dir/optional_args.pt" --input x:4x32 --input repeat=2.5
    grep -q "input 'repeat' has type int: 2.5 does not fit it" "$tmp/err" || fail "a float for an int must be refused by name"
    expect_exit 2 --model "$models_dir/optional_args.pt" --input x=3
    grep -q "input 'x' has type Tensor: 3 does not fit it; give it a shape" "$tmp/err" || fail "a value for a tensor must be refused by name"
    expect_exit 2 --model "$models_dir/optional_args.pt" --input x:4x32 --input repeat:4
    grep -q "input 'repeat' has type int: give it a value, --input repeat=VALUE" "$tmp/err" || fail "a shape for an int must be refused by name"
    expect_exit 2 --model "$models_dir/optional_args.pt" --input x:4x32 --input repeat=
    grep -q "must be NAME=VALUE" "$tmp/err" || fail "an empty value must be refused"
    ;;
  model_container_inputs)
    # forward(x, state: Tuple[Tensor, Tensor], extra: List[Tensor]): the items are given as
    # NAME.0, NAME.1, ...; ka runs the graph (the tuple's unpacking is glue), correct against
    # libtorch on every leaf of the (tensor, tuple) it returns.
    items=(--input x:4x32 --input state.0:4x32 --input state.1:4x32 --input extra.0:4x32
           --input extra.1:4x32 --input extra.2:4x32)
    "$ka_bench" --model "$models_dir/container_inputs.pt" "${items[@]}" --explain >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc, expected 0: $(cat "$tmp/err")"
    grep -q "inputs x=\[4, 32\] state.0=\[4, 32\] state.1=\[4, 32\] extra.0=\[4, 32\] extra.1=\[4, 32\] extra.2=\[4, 32\]" "$tmp/out" || fail "the heading must give every item"
    grep -qE "^  ka: [0-9]+ task\(s\); correct" "$tmp/out" || fail "ka's run is not correct"
    grep -q "torch::jit interpreter" "$tmp/out" && fail "the graph went to the interpreter"
    OMP_WAIT_POLICY=passive "$ka_bench" --model "$models_dir/container_inputs.pt" "${items[@]}" \
      --db "$tmp/ka.db" "${quick[@]}" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "timed run: exit $rc, expected 0"
    key=$("$sqlite3" "$tmp/ka.db" "SELECT shape_key FROM results WHERE impl='ka'")
    [ "$key" = "x=4x32,state.0=4x32,state.1=4x32,extra.0=4x32,extra.1=4x32,extra.2=4x32" ] || fail "stored shape key: '$key'"
    # A tuple's missing item, one past its end, none of its items, a list without item 0.
    expect_exit 2 --model "$models_dir/container_inputs.pt" --input x:4x32 --input state.0:4x32 \
      --input extra.0:4x32
    grep -q "no shape for input 'state.1'" "$tmp/err" || fail "a missing tuple item must be named"
    expect_exit 2 --model "$models_dir/container_inputs.pt" "${items[@]}" --input state.2:4x32
    grep -q "input 'state.2' is not an item of what forward takes" "$tmp/err" || fail "an item past the tuple's end must be refused by name"
    expect_exit 2 --model "$models_dir/container_inputs.pt" --input x:4x32 --input extra.0:4x32
    grep -q "no items for input 'state' (Tuple\[Tensor, Tensor\]: give them as --input state.0:SHAPE" "$tmp/err" || fail "a tuple without items must say how to give them"
    expect_exit 2 --model "$models_dir/container_inputs.pt" --input x:4x32 --input state.0:4x32 \
      --input state.1:4x32 --input extra.1:4x32
    grep -q "input 'extra' has type List\[Tensor\]; give its items from extra.0 on" "$tmp/err" || fail "a list without item 0 must be refused"
    expect_exit 2 --model "$models_dir/container_inputs.pt" --input x:4x32 --input state.0=3 \
      --input state.1:4x32 --input extra.0:4x32
    grep -q "input 'state.0' has type Tensor: 3 does not fit it" "$tmp/err" || fail "a value for a tensor item must be refused by name"
    # A container given as one shape or one value instead of its items.
    expect_exit 2 --model "$models_dir/container_inputs.pt" --input x:4x32 --input state.0:4x32 \
      --input state.1:4x32 --input extra:4x32
    grep -q "input 'extra' has type List\[Tensor\]: give its items one by one, --input extra.0:SHAPE (or extra.0=VALUE), extra.1 and so on, not one shape" "$tmp/err" || fail "a shape for a list must say to give its items"
    expect_exit 2 --model "$models_dir/container_inputs.pt" --input x:4x32 --input state=3 \
      --input extra.0:4x32
    grep -q "input 'state' has type Tuple\[Tensor, Tensor\]: give its items one by one, .*not one value" "$tmp/err" || fail "a value for a tuple must say to give its items"
    # Items that fit the types but not the model: libtorch's reason, with every item given.
    expect_exit 2 --model "$models_dir/container_inputs.pt" --input x:4x32 --input state.0:4x32 \
      --input state.1:4x32 --input extra.0:4x32 --input extra.1:1x32
    grep -q "(x:4x32:float32, state.0:4x32:float32, state.1:4x32:float32, extra.0:4x32:float32, extra.1:1x32:float32): libtorch says: .*stack expects each tensor to be equal size" "$tmp/err" || fail "a list whose items do not stack must be refused with libtorch's reason"
    ;;
  fused_writes_rows)
    # A tiny graph suite: three variants per graph case, two per GEMM case, all stored.
    "$ka_bench" --suite "$suite_fixtures/fused_tiny.yaml" --db "$tmp/ka.db" "${quick[@]}" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc, expected 0"
    grep -qE "^mlp +mlp_gelu +\| +[0-9.]+ +[0-9.]+ +[0-9.]+% +[0-9.]+% \| +[0-9.]+ \| +[0-9.]+ \| +[0-9.]+x \| +[0-9.]+x$" "$tmp/out" || fail "no graph summary row for 'mlp' (ka ms, GB/s, %copy paired, %best)"
    grep -qE "^copy bandwidth \(measured now" "$tmp/out" || fail "no copy bandwidth line"
    grep -qE "^primes +37 +53 +71 " "$tmp/out" || fail "no GEMM summary row"
    grep -q "^stored 11 benchmark results" "$tmp/out" || fail "closing line"
    rows=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM results WHERE disposition='ok' AND median_ns > 0 AND repetitions = 2")
    [ "$rows" = "11" ] || fail "expected 11 ok rows (3 graphs x 3 variants + 1 GEMM x 2), got $rows"
    impls=$("$sqlite3" "$tmp/ka.db" "SELECT group_concat(impl, ' ') FROM (SELECT impl FROM results WHERE case_name='scores' ORDER BY impl)")
    [ "$impls" = "ka ka_unfused libtorch" ] || fail "variants of a graph case: $impls"
    row=$("$sqlite3" "$tmp/ka.db" "SELECT op, shape_key, benchmark_name FROM results WHERE case_name='residual_ln' AND impl='ka'")
    [ "$row" = "graph:residual_layer_norm|x=9x80,res=9x80,w=80,b=80|fused_tiny/residual_ln/ka" ] || fail "graph row: $row"
    kernel=$("$sqlite3" "$tmp/ka.db" "SELECT kernel FROM results WHERE case_name='mlp' AND impl='ka_unfused'")
    [[ "$kernel" == gemm_f32_blocked\ v*\ +\ ew_chain_f32\ v* ]] || fail "unfused kernels: '$kernel'"
    cfg=$("$sqlite3" "$tmp/ka.db" "SELECT config FROM results WHERE case_name='mlp' AND impl='ka'")
    [[ "$cfg" == grid=*" | "grid=* ]] || fail "fused configs: '$cfg'"
    err=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM results WHERE impl LIKE 'ka%' AND max_abs_error IS NOT NULL")
    [ "$err" = "7" ] || fail "max_abs_error stored for $err of 7 ka rows"
    ;;
  bad_graph_suite)
    "$ka_bench" --suite "$suite_fixtures/bad_graph.yaml" --db "$tmp/ka.db" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "exit $rc, expected 2"
    grep -q "bad_graph.yaml:14: unknown graph 'mul' (the suite's graphs: add)" "$tmp/err" || fail "message must name file and line"
    [ ! -e "$tmp/ka.db" ] || fail "a database was created for a failed start"
    "$ka_bench" --suite "$suite_fixtures/bad_graph_input.yaml" --explain >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "missing input: exit $rc, expected 2"
    grep -q "bad_graph_input.yaml:12: missing input 'b' of graph 'add'" "$tmp/err" || fail "missing input message"
    "$ka_bench" --suite "$suite_fixtures/bad_model.yaml" --explain >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "missing model file: exit $rc, expected 2"
    grep -q "bad_model.yaml:4: model 'block': no file 'no_such_block.pt' in .*suites" "$tmp/err" || fail "missing model file message"
    "$ka_bench" --suite "$suite_fixtures/unknown_model.yaml" --explain >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "unknown model: exit $rc, expected 2"
    grep -q "unknown_model.yaml:8: unknown model 'block' (the suite's models: resnet)" "$tmp/err" || fail "unknown model message"
    ;;
  breakdown)
    "$ka_bench" --suite smoke --breakdown --benchmark_filter='primes|square' >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc"
    grep -qE "^case +calls +call +other +extract +execute +fallback +kernel +pipeline +overhead +cpu/call +IPC" "$tmp/out" || fail "no breakdown header"
    # primes is an op case: its kernel alone is timed too, and pipeline = call - kernel.
    grep -qE "^primes +[0-9]+( +-?[0-9.]+ [nmu]?s){7} +[0-9.]+%" "$tmp/out" || fail "no breakdown row for primes"
    [ "$(grep -c '^one ' "$tmp/out")" = "0" ] || fail "filter ignored"
    # A graph whose time is libtorch's convolution (a fallback, ~55 MFLOP) before a relu over
    # 74k floats: the convolution is counted as running a kernel, not as ka's overhead, and the
    # stages add up to the call.
    "$ka_bench" --suite "$suite_fixtures/fallback_heavy.yaml" --breakdown >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "fallback_heavy: exit $rc"
    row=$(grep -E "^conv_relu " "$tmp/out") || fail "no breakdown row for conv_relu"
    to_ns() { awk -v v="$1" -v u="$2" 'BEGIN { m = (u == "ms") ? 1e6 : (u == "us") ? 1e3 : (u == "s") ? 1e9 : 1; printf "%.0f", v * m }'; }
    # Graph cases have no bare kernel: kernel and pipeline are one "-" each.
    read -r _ _ cv cu ov ou xv xu ev eu fv fu _ _ overhead _ <<<"$row"
    call=$(to_ns "$cv" "$cu"); other=$(to_ns "$ov" "$ou"); extract=$(to_ns "$xv" "$xu")
    execute=$(to_ns "$ev" "$eu"); fallback=$(to_ns "$fv" "$fu")
    [ "$fallback" -gt $((call / 2)) ] || fail "conv_relu: fallback $fallback ns of a $call ns call ($row)"
    sum=$((other + extract + execute + fallback))
    [ "$sum" -ge $((call * 95 / 100)) ] && [ "$sum" -le $((call * 105 / 100)) ] || fail "conv_relu: stages add to $sum ns of a $call ns call ($row)"
    awk -v o="${overhead%\%}" 'BEGIN { exit !(o < 50) }' || fail "conv_relu: overhead $overhead counts the fallback ($row)"
    ;;
  trace)
    "$ka_bench" --suite smoke --breakdown --benchmark_filter=primes --trace "$tmp/trace.json" >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 0 ] || fail "exit $?"
    grep -q '"traceEvents"' "$tmp/trace.json" || fail "no Chrome trace written"
    for stage in call extract execute; do
      grep -q "\"name\":\"$stage\"" "$tmp/trace.json" || fail "no $stage span in the trace"
    done
    grep -qE "^trace: [0-9]+ spans written to $tmp/trace.json" "$tmp/err" || fail "no trace line"
    ;;
  bad_numbers)
    # Numeric options, a database that keeps nothing and the environment are refused before
    # anything runs: exit 2, naming the option (or variable) and the value.
    expect_fail 2 "ka-bench: error: --threads: '100000' is not a thread count from 0 (all cores) to " "$ka_bench" --suite smoke --db "$tmp/ka.db" --threads 100000
    grep -qE "logical cores, at most 1024\)" "$tmp/err" || fail "--threads: the bound is not explained"
    expect_fail 2 "--repetitions: '0' is not a whole number >= 1" "$ka_bench" --suite smoke --db "$tmp/ka.db" --repetitions 0
    expect_fail 2 "--min-time: 'nan' is not a finite number > 0" "$ka_bench" --suite smoke --db "$tmp/ka.db" --min-time nan
    # ka-bench's rounds are its repetitions (Note [Interleaved rounds]); a --benchmark_out
    # format it cannot write is refused before anything runs.
    expect_fail 2 "ka-bench: error: --benchmark_repetitions: ka-bench sets it; use --repetitions N" "$ka_bench" --suite smoke --db "$tmp/ka.db" --benchmark_repetitions=3
    expect_fail 2 "ka-bench: error: --benchmark_out_format='csv': expected json or console" "$ka_bench" --suite smoke --db "$tmp/ka.db" --benchmark_out="$tmp/o.json" --benchmark_out_format=csv
    expect_fail 2 "ka-bench: error: --db '': the results go to this database" "$ka_bench" --suite smoke --db '' "${quick[@]}"
    expect_fail 2 "ka-bench: error: --db ':memory:': the results go to this database" "$ka_bench" --suite smoke --db :memory: "${quick[@]}"
    for bad in 0 -1 abc 100000; do
      expect_fail 2 "ka-bench: error: KA_NUM_THREADS='$bad': expected a whole number of threads from 1 to " env KA_NUM_THREADS=$bad "$ka_bench" --suite smoke --db "$tmp/ka.db"
    done
    expect_fail 2 "ka-bench: error: KA_LOG_LEVEL='bogus': expected one of trace, debug, info, warn, error, critical or off" env KA_LOG_LEVEL=bogus "$ka_bench" --suite smoke --db "$tmp/ka.db"
    [ ! -e "$tmp/ka.db" ] || fail "a refused command created the database"
    ;;
  unwritable_outputs)
    # A --trace or --benchmark_out that cannot be written fails the run (exit 1, the path
    # named) before anything is measured.
    args=(--suite smoke --benchmark_filter=primes --db "$tmp/ka.db" "${quick[@]}")
    expect_fail 1 "ka-bench: error: --trace: cannot write '$tmp/missing/trace.json': No such file or directory" "$ka_bench" "${args[@]}" --trace "$tmp/missing/trace.json"
    expect_fail 1 "ka-bench: error: --benchmark_out: cannot write '/dev/full': No space left on device" "$ka_bench" "${args[@]}" --benchmark_out=/dev/full
    expect_fail 1 "ka-bench: error: --benchmark_out: cannot write '$tmp/missing/out.json': No such file or directory" "$ka_bench" "${args[@]}" --benchmark_out="$tmp/missing/out.json"
    grep -q "Benchmark" "$tmp/out" && fail "benchmarks ran although --benchmark_out cannot be written"
    # Written where it can be: exit 0.
    "$ka_bench" "${args[@]}" --benchmark_out="$tmp/out.json" --trace "$tmp/trace.json" >"$tmp/out" 2>"$tmp/err" || fail "writable outputs: exit $?"
    grep -q '"benchmarks"' "$tmp/out.json" || fail "--benchmark_out not written"
    grep -q '"traceEvents"' "$tmp/trace.json" || fail "--trace not written"
    ;;
  device_cuda)
    # With a GPU and a CUDA libtorch: the smoke suite's op cases on CUDA device 0, timed by
    # events, against cuBLAS. Without: exit 1 and the reason, before anything runs or is stored.
    "$ka_bench" --suite smoke --device cuda --db "$tmp/ka.db" "${quick[@]}" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -eq 0 ]; then
      grep -q "two CUDA events around each call" "$tmp/out" || fail "method line does not say CUDA events"
      grep -qE "^primes +37 +53 +71 " "$tmp/out" || fail "no row for case 'primes'"
      grep -q "cuBLAS" "$tmp/out" || fail "reference not named"
      fp=$("$sqlite3" "$tmp/ka.db" "SELECT fingerprint FROM runs")
      [[ "$fp" == cuda\|* ]] || fail "run not under a CUDA fingerprint: '$fp'"
    else
      [ $rc -eq 1 ] || fail "no GPU: expected exit 1, got $rc"
      grep -qE "error: --device cuda: (no CUDA device to run on|the libtorch ka is linked with)" "$tmp/err" || fail "no reason given: $(cat "$tmp/err")"
      [ ! -f "$tmp/ka.db" ] || fail "a database was written without a GPU"
      grep -q "summary" "$tmp/out" && fail "benchmarks ran without a GPU"
    fi
    "$ka_bench" --suite smoke --device tpu >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "--device tpu: expected exit 2"
    ;;
  vs_peers)
    # Every CPU BLAS as a reference: each peer is checked against libtorch, timed and stored.
    all=libtorch,openblas,blis,onednn
    expect_exit 0 --suite smoke --db "$tmp/ka.db" "${quick[@]}" --vs $all
    grep -qE "^peer openblas: OpenBLAS [0-9.]+ cblas_sgemm, core [A-Za-z0-9]+ \(OpenBLAS " "$tmp/out" || fail "header: no OpenBLAS version and core"
    grep -qE "^peer blis: BLIS [0-9.]+ cblas_sgemm, configuration [a-z0-9]+;" "$tmp/out" || fail "header: no BLIS version and configuration"
    grep -qE "^peer onednn: oneDNN [0-9]+\.[0-9]+\.[0-9]+ dnnl_sgemm, ISA [a-z0-9_]+ " "$tmp/out" || fail "header: no oneDNN version and ISA"
    grep -qE "^case .*\| libtorch ms .*\| openblas ms +GFLOP/s \| +blis ms +GFLOP/s \| +onednn ms +GFLOP/s \| +ka/lt \| +ka/best best$" "$tmp/out" || fail "summary columns"
    grep -qE "^primes +37 +53 +71 \|.*\| +[0-9.]+x \| +[0-9.]+x (libtorch|openblas|blis|onednn)$" "$tmp/out" || fail "no ka/lt and ka/best for primes"
    grep -qE "^geometric mean of ka/best over 5 cases: [0-9.]+x" "$tmp/out" || fail "no geometric mean of ka/best"
    grep -qE "^read bandwidth \(measured now, .*\): [0-9.]+ GB/s" "$tmp/out" || fail "no read bandwidth in the header"
    grep -qE "^decode case .*\| read GB/s roof GF/s \| +ka GB/s +%roof \|" "$tmp/out" || fail "no decode table"
    grep -qE "^tails +13 +300 +33 \| +[0-9.]+ +[0-9.]+ \| +[0-9.]+ +[0-9.]+% \|" "$tmp/out" || fail "no decode row for tails (M = 13)"
    grep -q "^stored 25 benchmark results" "$tmp/out" || fail "closing line: 5 cases x 5 variants"
    for p in openblas blis onednn; do
      ok=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM results WHERE impl='$p' AND disposition='ok' AND median_ns > 0 AND max_abs_error IS NOT NULL AND benchmark_name LIKE 'smoke/%/$p'")
      [ "$ok" = "5" ] || fail "expected 5 checked ok rows for $p, got $ok"
    done
    kernel=$("$sqlite3" "$tmp/ka.db" "SELECT kernel FROM results WHERE impl='blis' AND case_name='primes'")
    [[ "$kernel" == "BLIS "*" cblas_sgemm, configuration "* ]] || fail "blis kernel: '$kernel'"
    core=$("$sqlite3" "$tmp/ka.db" "SELECT openblas_core FROM runs")
    [[ "$core" == *"; --vs openblas: OpenBLAS "*"; blis: BLIS "*"; onednn: oneDNN "* ]] || fail "runs.openblas_core lacks the peers: '$core'"
    # Without libtorch: ka/best only, libtorch still the correctness reference, not timed.
    expect_exit 0 --suite smoke --no-db "${quick[@]}" --vs openblas --benchmark_filter=primes
    grep -q "libtorch ms" "$tmp/out" && fail "libtorch timed although --vs left it out"
    grep -qE "^primes +37 +53 +71 \|.*\| +[0-9.]+x openblas$" "$tmp/out" || fail "--vs openblas row"
    ;;
  vs_missing)
    expect_exit 2 --suite smoke --db "$tmp/ka.db" "${quick[@]}" --vs libtorch,mkl
    grep -q "ka-bench: error: --vs mkl: unknown implementation (expected libtorch, openblas, blis, onednn or ka-kernel)" "$tmp/err" || fail "message"
    [ ! -e "$tmp/ka.db" ] || fail "a database was created for a failed start"
    expect_exit 2 --suite smoke --no-db --vs blis,blis
    grep -q "names blis twice" "$tmp/err" || fail "repeated-name message"
    ;;
  isa_avx2)
    # One ISA family for ka and every library; skipped where the CPU has no AVX2.
    if ! grep -qw avx2 /proc/cpuinfo; then
      expect_exit 2 --suite smoke --no-db --isa avx2
      grep -q "this CPU supports only" "$tmp/err" || fail "message"
      echo "PASS [$case_name] (no AVX2 here: only the refusal was checked)"
      exit 0
    fi
    expect_exit 0 --suite smoke --db "$tmp/ka.db" "${quick[@]}" --vs libtorch,openblas,blis,onednn --isa avx2 --benchmark_filter='primes|tails'
    grep -qE "^ISA restriction \(--isa avx2\): KA_CPU_ISA=avx2 OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2 BLIS_ARCH_TYPE=[0-9]+, set before any library loaded; running: ka avx2, libtorch Haswell, openblas Haswell, blis haswell, onednn avx2; %peak " "$tmp/out" || fail "ISA restriction line"
    grep -qE "^device: .*, avx2 micro-kernel$" "$tmp/out" || fail "ka not on its avx2 micro-kernel"
    grep -qE "^peer openblas: OpenBLAS [0-9.]+ cblas_sgemm, core Haswell " "$tmp/out" || fail "OpenBLAS does not report a Haswell core"
    grep -q "OPENBLAS_CORETYPE=Haswell;" "$tmp/out" || fail "libtorch line"
    coretype=$("$sqlite3" "$tmp/ka.db" "SELECT openblas_coretype || '|' || openblas_core FROM runs")
    [[ "$coretype" == "Haswell|Haswell; --vs openblas: OpenBLAS "*"core Haswell; blis: BLIS "*"configuration haswell; onednn: oneDNN "*"ISA avx2" ]] || fail "runs row: '$coretype'"
    ok=$("$sqlite3" "$tmp/ka.db" "SELECT count(*) FROM results WHERE disposition='ok'")
    [ "$ok" = "10" ] || fail "expected 10 ok rows (2 cases x 5 variants), got $ok"
    expect_exit 2 --suite smoke --no-db --isa sse2
    # AVX-512 where the CPU has it (the names ka's kernels require), else a refusal.
    if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo; then
      expect_exit 0 --suite smoke --no-db "${quick[@]}" --vs openblas --isa avx512 --benchmark_filter=primes
      grep -qE "^ISA restriction \(--isa avx512\): .*running: ka avx512, libtorch SkylakeX, openblas SkylakeX; %peak " "$tmp/out" || fail "--isa avx512 line"
    else
      expect_exit 2 --suite smoke --no-db --isa avx512
      grep -q "ka-bench: error: --isa avx512: this CPU supports only" "$tmp/err" || fail "--isa avx512 refusal"
    fi
    ;;
  *)
    echo "unknown test case $case_name"; exit 2 ;;
esac
echo "PASS [$case_name]"
