# Sourced by the CLI test scripts after they set case_name: a scratch folder ($tmp, removed on
# exit) and fail MESSAGE, which prints the message and the command's saved output, then exits 1.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL [$case_name]: $*"; echo "--- stdout"; cat "$tmp/out" 2>/dev/null; echo "--- stderr"; cat "$tmp/err" 2>/dev/null; exit 1; }
# wait_until_stopped PID: waits (up to 60 s) until process PID is stopped (state T, as after
# KA_TEST_STOP_AFTER_TRIALS); returns 1 when it ended or never stopped.
wait_until_stopped() {
  local state
  for _ in $(seq 1 1200); do
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)
    [ "$state" = T ] && return 0
    [ -n "$state" ] || return 1  # gone: it finished or failed without stopping
    sleep 0.05
  done
  return 1
}
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
