#!/usr/bin/env bash
# The GPU evidence for the CUDA backend, on a machine with an NVIDIA Hopper GPU (sm_90) that
# reaches no package registry: what the machine is; ka configured with CUDA
# for sm_90 against the libtorch there (python3's torch, 2.x with CUDA) and the Debian packages
# carried in .device/deps (scripts/device-deps.sh fetches them here); built; `ctest -L gpu`;
# then ka_gpu_bench (bench/gpu_bench.cpp): copy bandwidth, ka's element-wise kernel as % of it,
# ka's SGEMM swept over its whole space against cuBLAS, CUPTI against CUDA events; then
# ka-bench --device cuda (matmul and gemm_gpu suites against cuBLAS), a short ka-tune of the
# 4096^3 SGEMM on the GPU and ka-bench with that table.
# Logs go to $OUT (when set, e.g. by a remote runner) or ./device-check-out. Each stage says
# how long it took; a failed stage stops the script with its log's tail.
#
# Here:   scripts/device-deps.sh
# There:  device run, carry [".device"], command "bash scripts/device-check.sh", timeout 540
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/device-check-out}
mkdir -p "$out"
jobs=$(nproc)
start=$SECONDS
stage() { echo; echo "== [$((SECONDS - start)) s] $*"; }
fail() { echo "device-check: FAILED at: $*"; exit 1; }

stage "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
  --format=csv 2>&1 | tee "$out/gpu.txt" || fail "nvidia-smi"
nvcc --version 2>&1 | tail -2
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0))' \
  2>&1 | tee -a "$out/gpu.txt"

stage "dependencies: Debian packages from .device/deps into a private prefix"
deps=/tmp/ka-deps
mkdir -p "$deps"
ls .device/deps/*.deb >/dev/null 2>&1 || fail "no .device/deps/*.deb: run scripts/device-deps.sh here and carry .device"
for f in .device/deps/*.deb; do dpkg -x "$f" "$deps" || fail "unpacking $f"; done
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export PATH="$deps/usr/bin:$PATH"
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') || fail "python3 torch"

stage "configure (Release, CUDA sm_90, libtorch from $torch_prefix)"
cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DKA_ENABLE_WERROR=OFF \
  -DKA_ENABLE_TESTS=ON -DKA_ENABLE_BENCH=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/usr" >"$out/configure.log" 2>&1 ||
  { tail -40 "$out/configure.log"; fail "configure"; }
grep -E "^-- ka:" "$out/configure.log"

stage "build ($jobs jobs)"
cmake --build build/device -j "$jobs" >"$out/build.log" 2>&1 ||
  { grep -E "error|Error" "$out/build.log" | head -40; fail "build"; }

stage "ctest -L gpu"
ctest --test-dir build/device -L gpu --output-on-failure --timeout 120 >"$out/ctest-gpu.log" 2>&1
rc=$?
grep -E "tests passed|tests failed|Skipped|\*\*\*Failed" "$out/ctest-gpu.log" | head -40
[ $rc -eq 0 ] || echo "device-check: ctest -L gpu FAILED (see ctest-gpu.log); the figures follow anyway"

stage "ctest -R device_cuda (ka-bench and ka-tune --device cuda through their CLI tests)"
ctest --test-dir build/device -R 'cli\.ka_(bench|tune)\.device_cuda' --output-on-failure \
  --timeout 300 >"$out/ctest-cli-cuda.log" 2>&1 ||
  echo "device-check: the --device cuda CLI tests FAILED (see ctest-cli-cuda.log)"
grep -E "tests passed|tests failed|\*\*\*Failed|FAIL" "$out/ctest-cli-cuda.log" | head -20

stage "ka_gpu_bench: copy bandwidth, element-wise, SGEMM over its space vs cuBLAS, CUPTI vs events"
build/device/bin/ka_gpu_bench 2>&1 | tee "$out/gpu-bench.txt"

# The user-facing tools on the GPU: ka-bench against cuBLAS through libtorch (untuned, the
# heuristics' configs), a short ka-tune of the 4096^3 SGEMM stored under the GPU's
# fingerprint, then ka-bench again with that table (the tuned row says 'exact').
stage "ka-bench --suite matmul --device cuda (untuned, vs cuBLAS)"
timeout 150 build/device/bin/ka-bench --suite matmul --device cuda --db "$out/bench.db" \
  --repetitions 3 --min-time 0.05 2>&1 | grep -vE '^(matmul|gemm_gpu)/' | tee "$out/bench-matmul.txt"
stage "ka-bench --suite gemm_gpu --device cuda (untuned)"
timeout 120 build/device/bin/ka-bench --suite gemm_gpu --device cuda --db "$out/bench.db" \
  --repetitions 3 --min-time 0.1 2>&1 | grep -vE '^gemm_gpu/' | tee "$out/bench-gemm-gpu.txt"
stage "ka-tune --device cuda --op aten::mm --shapes 4096x4096x4096 (model strategy, 10 configs)"
timeout 120 build/device/bin/ka-tune --device cuda --op aten::mm --shapes 4096x4096x4096 \
  --strategy model --budget 10 --config-budget 0.3 --db "$out/tuned.db" -q 2>&1 | tee "$out/tune.txt"
stage "ka-bench --suite gemm_gpu --device cuda --tuned-table (4096^3 tuned)"
timeout 120 build/device/bin/ka-bench --suite gemm_gpu --device cuda --no-db \
  --tuned-table "$out/tuned.db" --repetitions 3 --min-time 0.1 --benchmark_filter=square_4096 2>&1 |
  grep -vE '^gemm_gpu/' | tee "$out/bench-tuned.txt"

stage "done"
