#!/usr/bin/env bash
# Makes `import ka` (and `import torch`) work in python3 for the build tree's package
# (build/ci/python, around build/ci/lib/libka_torch.so), as `pip install -e` would: writes
# ka-build.pth into the site-packages of Debian's python3 and of the python3 on PATH when that
# is another one (pyenv, a venv). Torch comes from Debian's python3-torch in
# /usr/lib/python3/dist-packages; another interpreter of the same Python version that cannot
# import torch gets that folder on its path too (after its own packages). Safe to run again;
# prints what it did. Usage: scripts/python-path.sh [BUILD_DIR]   (default build/ci)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=$(cd "${1:-build/ci}" && pwd)
debian_py=/usr/bin/python3
debian_torch=/usr/lib/python3/dist-packages

version_of() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }

link() {
  local py=$1 lines site
  lines="$build/python"
  if ! "$py" -c 'import torch' >/dev/null 2>&1; then
    if [ "$(version_of "$py")" = "$(version_of "$debian_py")" ] && [ -d "$debian_torch/torch" ]; then
      lines+=$'\n'"$debian_torch"
    else
      echo "python-path: $py cannot import torch and is not Python $(version_of "$debian_py") (Debian's python3-torch): use $debian_py" >&2
    fi
  fi
  site=$("$py" -c 'import site; print(site.getsitepackages()[0])')
  if mkdir -p "$site" 2>/dev/null && printf '%s\n' "$lines" > "$site/ka-build.pth" 2>/dev/null; then
    echo "python-path: $py imports ka from $build/python ($site/ka-build.pth)"
  else
    echo "python-path: cannot write $site; use PYTHONPATH=$build/python with $py" >&2
  fi
}

[ -x "$debian_py" ] && link "$debian_py"
path_py=$(command -v python3 || true)
if [ -n "$path_py" ] && [ "$(readlink -f "$path_py")" != "$(readlink -f "$debian_py")" ]; then
  real=$("$path_py" -c 'import sys; print(sys.executable)')
  [ "$(readlink -f "$real")" != "$(readlink -f "$debian_py")" ] && link "$path_py"
fi
exit 0
