#!/usr/bin/env bash
# The hand-off from ka-tune to a production binary, end to end (CI runs it after the README's
# test line, which builds build/ci):
#   1. cmake --install the build into a fresh prefix;
#   2. the installed ka-tune tunes the GEMMs of examples/production's transformer layer: its
#      linear layers (libtorch 1.13 runs a 3-d input's F.linear as mm by weight.t(), hence ':t')
#      and attention's bmm of the weights by v (a transposed view: strided, as ':t' builds);
#   3. examples/production, a separate CMake project, is built against that prefix
#      (find_package(ka)), compiling the tuned table in through the installed ka-db;
#   4. the program runs with the compiled-in table, then with KA_TUNED_TABLE: each run checks
#      its output against libtorch and that ka's GEMMs took their configurations from the table.
# Usage: scripts/production-example.sh [BUILD_DIR]   (default build/ci; work in BUILD_DIR/production)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build/ci}
work=$build/production
rm -rf "$work"
mkdir -p "$work"
prefix=$PWD/$work/prefix

echo "-- installing $build into $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"

echo "-- tuning the layer's GEMMs (64 tokens x 2, d_model 256, 4 heads, ffn 1024)"
tune=("$prefix/bin/ka-tune" --quiet --db "$work/tuned.db" --strategy random --budget 6)
"${tune[@]}" --op aten::mm --shapes 128x256x768:t,128x256x256:t,128x256x1024:t,128x1024x256:t
"${tune[@]}" --op aten::bmm --shapes 8x64x64x64:t

echo "-- building examples/production against $prefix"
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S examples/production -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DKA_TUNED_DB="$PWD/$work/tuned.db" "${launcher[@]}" >"$work/configure.log"
cmake --build "$work/build"

echo "-- the table compiled in"
"$work/build/transformer_layer" --table compiled
echo "-- the table from KA_TUNED_TABLE"
"$prefix/bin/ka-db" export --db "$work/tuned.db" --format sqlite --out "$work/tuned.table.db"
KA_TUNED_TABLE="$PWD/$work/tuned.table.db" "$work/build/transformer_layer" --table env
