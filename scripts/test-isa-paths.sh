#!/usr/bin/env bash
# Runs the kernel, extractor, tuner and libka_torch unit tests once per CPU ISA path this host
# can run, forced with KA_CPU_ISA: generic, then avx2 and avx512 where the CPU has them. An
# AVX-512 machine so also exercises what an AVX2 user runs (the automatic choice would always
# take avx512 there). Run after scripts/test.sh has built the preset.
# Usage: scripts/test-isa-paths.sh [PRESET]   PRESET: ci (default), dev, asan, tsan.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
preset=${1:-ci}
dir=build/$preset/bin

# The same rule as ka::cpu_isa_level() (core/src/fingerprint.cpp).
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { for f in "$@"; do [[ $flags == *" $f "* ]] || return 1; done; }
isas=(generic)
has avx2 fma && isas+=(avx2)
has avx512f avx512bw avx512vl && isas+=(avx512)

failed=()
for isa in "${isas[@]}"; do
  modules=(kernels extractor tuner pytorch)
  for module in "${modules[@]}"; do
    bin=$dir/ka_${module}_tests
    [ -x "$bin" ] || { echo "test-isa-paths: $bin is missing (build the $preset preset first)" >&2; exit 1; }
    echo "== KA_CPU_ISA=$isa: $module unit tests =="
    if ! KA_CPU_ISA=$isa "$bin" --gtest_brief=1; then failed+=("$isa/$module"); fi
  done
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "test-isa-paths: failed: ${failed[*]}" >&2
  exit 1
fi
echo "test-isa-paths: ${#isas[@]} ISA path(s) (${isas[*]}) x ${#modules[@]} test programs passed"
