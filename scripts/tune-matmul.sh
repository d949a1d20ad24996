#!/usr/bin/env bash
# Tunes ka's GEMM for every shape of the matmul suite (aten::mm and aten::addmm cases) at one
# thread count, then benchmarks the suite with the tuned table against libtorch at its best
# OpenBLAS kernels (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for that command only).
# Each thread count keeps its own table, as a config's tiles are planned for its threads.
#   scripts/tune-matmul.sh THREADS [BUILD_DIR] [BUDGET]
# writes tuned-matmul-<THREADS>t.db and prints ka-tune's and ka-bench's summaries.
set -euo pipefail
threads=${1:?usage: scripts/tune-matmul.sh THREADS [BUILD_DIR] [BUDGET]}
build=${2:-build/ci}
budget=${3:-24}
db=tuned-matmul-${threads}t.db
for op in aten::mm aten::addmm; do
  "$build/bin/ka-tune" --op "$op" --suite matmul --threads "$threads" --budget "$budget" \
    --config-budget 0.5 --db "$db" -q
done
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$build/bin/ka-bench" --suite matmul \
  --threads "$threads" --tuned-table "$db" --no-db
