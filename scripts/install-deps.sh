#!/usr/bin/env bash
# Installs the Debian packages ka builds and tests with. Safe to run again: when everything is
# already installed it changes nothing and needs no network.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache git pkg-config
  libtorch-dev libopenblas0-pthread      # libtorch 1.13 (CPU) and the BLAS it should call
  libblis4-pthread libdnnl-dev           # ka-bench --vs blis,onednn (oneDNN's header for types)
  libbenchmark-dev libgtest-dev libgmock-dev
  libsqlite3-dev sqlite3
  libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  clang-14 libfuzzer-14-dev              # the fuzz preset (scripts/fuzz.sh): libFuzzer targets
  chromium fonts-dejavu-core python3     # the browser test of ka-db report (label browser)
  slurm-wlm munge                        # the one-node Slurm cluster of the slurm test
  python3-torch python3-pytest python3-yaml  # libka_torch from Python: package `ka`, its tests
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} Debian packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"

# libtorch must call OpenBLAS, not the reference BLAS (10x slower: the comparison would be
# meaningless). Debian's alternatives pick OpenBLAS once it is installed; check it.
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
case "$blas" in
  *openblas*) ;;
  *) echo "install-deps: warning: libblas.so.3 is $blas, not OpenBLAS; libtorch's reference will be slow" >&2 ;;
esac
