#!/usr/bin/env bash
# Fetches the Debian packages ka builds against into .device/deps (ignored by git) so that
# scripts/device-check.sh can unpack them on a GPU machine that reaches no package registry.
# Run here, where apt works; then call the device tool with carry [".device"]. Safe to run
# again: packages already fetched are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(
  libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev
  nlohmann-json3-dev libsqlite3-dev libsqlite3-0 sqlite3 libbenchmark-dev libbenchmark1debian
  libgtest-dev libgmock-dev
)
mkdir -p .device/deps
cd .device/deps
for p in "${packages[@]}"; do
  if compgen -G "${p}_*.deb" >/dev/null; then continue; fi
  apt-get download -qq -o APT::Sandbox::User=root "$p"
done
echo "device-deps: $(ls ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in .device/deps"
