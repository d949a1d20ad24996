#!/usr/bin/env bash
# ka-bench on suites that ask for more than the machine has (issue 21 item 3): every refusal
# names the file, line and limit and exits 2 before anything is allocated; a long graph runs.
# Usage: ka_bench_bounds_test.sh CASE KA_BENCH
set -u
case_name=$1
ka_bench=$2
source "$(dirname "$0")/cli_common.sh"

# chain_suite NODES FILE: a graph case whose graph is a chain of NODES adds.
chain_suite() {
  {
    printf 'suite: chain\ngraphs:\n  chain: |\n    graph(%%x : Tensor, %%y : Tensor):\n'
    printf '      %%one : int = prim::Constant[value=1]()\n'
    printf '      %%v0 : Tensor = aten::add(%%x, %%y, %%one)\n'
    awk -v n="$1" 'BEGIN { for (i = 1; i < n; ++i) printf "      %%v%d : Tensor = aten::add(%%v%d, %%y, %%one)\n", i, i - 1 }'
    printf '      return (%%v%d)\n' $(($1 - 1))
    printf 'groups:\n  - model: synthetic\n    cases:\n'
    printf '      - {name: chain, graph: chain, inputs: {x: [4], y: [4]}}\n'
  } >"$2"
}

case "$case_name" in
  huge_op_case)
    # 2^48 floats each of A, B, ka's C and libtorch's C: 2^52 bytes.
    printf 'suite: huge\ngroups:\n  - model: m\n    cases:\n      - {name: ok, op: aten::mm, M: 4, K: 4, N: 4}\n      - {name: huge, op: aten::mm, M: 16777216, K: 16777216, N: 16777216}\n' >"$tmp/huge.yaml"
    expect_fail 2 "huge.yaml:6: case 'huge' needs 4.0 PiB (4503599627370496 bytes) of tensors, more than the limit of" \
      "$ka_bench" --suite "$tmp/huge.yaml" --db "$tmp/ka.db"
    grep -qF "(three quarters of the memory available now)" "$tmp/err" || fail "the limit's origin"
    [ ! -e "$tmp/ka.db" ] || fail "a database was created for a refused suite"
    ;;
  overflowing_shape)
    printf 'suite: o\ngraphs:\n  g: |\n    graph(%%x : Tensor):\n      %%y : Tensor = aten::relu(%%x)\n      return (%%y)\ngroups:\n  - model: m\n    cases:\n      - {name: o, graph: g, inputs: {x: [16777216, 16777216, 16777216, 2]}}\n' >"$tmp/o.yaml"
    expect_fail 2 "o.yaml:10: the element count of input 'x' overflows int64 (limit 9223372036854775807)" \
      "$ka_bench" --suite "$tmp/o.yaml" --no-db
    ;;
  too_many_nodes)
    chain_suite 200000 "$tmp/long.yaml"
    expect_fail 2 "long.yaml:200010: graph 'chain' (line 3) has 200001 nodes, more than the limit of 200000" \
      "$ka_bench" --suite "$tmp/long.yaml" --no-db
    ;;
  long_chain_runs)
    # 12,000 nodes: libtorch's Code::Code overflowed the 8 MiB main stack at ~9,900.
    chain_suite 12000 "$tmp/chain.yaml"
    "$ka_bench" --suite "$tmp/chain.yaml" --no-db --explain >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc, expected 0"
    n=$(grep -c "task(s); correct" "$tmp/out")
    [ "$n" = "2" ] || fail "expected ka fused and unfused both correct against libtorch, got $n"
    grep -q "ka_unfused: 12000 task(s); correct" "$tmp/out" || fail "the unfused run has 12,000 tasks"
    ;;
  *)
    echo "unknown case $case_name"
    exit 1
    ;;
esac
echo "PASS [$case_name]"
