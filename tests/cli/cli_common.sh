# Sourced by the CLI test scripts after they set case_name: a scratch folder ($tmp, removed on
# exit) and fail MESSAGE, which prints the message and the command's saved output, then exits 1.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL [$case_name]: $*"; echo "--- stdout"; cat "$tmp/out" 2>/dev/null; echo "--- stderr"; cat "$tmp/err" 2>/dev/null; exit 1; }
