# Sourced by the CLI test scripts after they set case_name: a scratch folder ($tmp, removed on
# exit) and fail MESSAGE, which prints the message and the command's saved output, then exits 1.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL [$case_name]: $*"; echo "--- stdout"; cat "$tmp/out" 2>/dev/null; echo "--- stderr"; cat "$tmp/err" 2>/dev/null; exit 1; }
# expect_fail STATUS TEXT COMMAND...: runs COMMAND into $tmp/out and $tmp/err; fails unless it
# exits with STATUS and its stderr contains TEXT (a fixed string, not a pattern).
expect_fail() {
  local want=$1 text=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ $rc -eq "$want" ] || fail "$*: exit $rc, expected $want"
  grep -qF -- "$text" "$tmp/err" || fail "$*: stderr lacks '$text'"
}
