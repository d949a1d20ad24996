#!/usr/bin/env bash
# Quick start, line 1: installs the Debian packages, configures (preset `ci`: Release, -Werror,
# CUDA compiled when nvcc exists), builds ka-bench, ka-db and libka_torch.so, and makes
# `import ka` work in python3 (scripts/python-path.sh). Safe to run again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/install-deps.sh
cmake --preset ci >/dev/null
cmake --build --preset ci --target ka-bench ka-db ka_pytorch
scripts/python-path.sh build/ci
