#!/usr/bin/env bash
# Quick start, line 2 (and CI): installs what is missing, builds everything with a CMake preset
# and runs the whole test suite (unit + CLI; GPU tests skip with a reason where no GPU is
# visible). Usage: scripts/test.sh [PRESET]   PRESET: ci (default), dev, asan, tsan.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
preset=${1:-ci}
scripts/install-deps.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
ctest --preset "$preset"
