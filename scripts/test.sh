#!/usr/bin/env bash
# Quick start, line 2: installs what is missing, builds everything (preset `ci`) and runs the
# whole test suite (unit + CLI; GPU tests skip with a reason where no GPU is visible).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/install-deps.sh
cmake --preset ci >/dev/null
cmake --build --preset ci
ctest --preset ci
