#!/usr/bin/env bash
# A ka-tune campaign on a real Slurm cluster: one node, this machine, started here.
#   slurm_campaign_test.sh KA_TUNE KA_DB SQLITE3
# Starts munged, slurmctld and slurmd (Debian's slurm-wlm and munge) from a generated
# slurm.conf under a temporary folder, then:
#   1. a 4-shard campaign (3 shapes: one sliced in two) and its merge job: the merged database
#      holds every shard's trials exactly once and a recommendation per shape, and the same
#      configurations as an unsharded ka-tune --strategy exhaustive on the same cores; then a
#      campaign on all cores (another fingerprint) into the same database: two device tables;
#   2. a campaign cancelled half-way (scancel) and submitted again: only the unfinished shards
#      run again, no trial is measured twice, and the merge equals the unsharded sweep;
#   3. a campaign with a shard that fails: the merge job fails naming the shard and its log,
#      and the campaign's database is not created.
# Every daemon it started is stopped by pid on exit, failed or not. Exits 77 (skip), with the
# reason, only when the daemons cannot start on this host.
set -euo pipefail
ka_tune=$(readlink -f "$1")
ka_db=$(readlink -f "$2")
sqlite=$3

skip() { echo "SKIP: $*"; exit 77; }
for tool in munged mungekey slurmctld slurmd sbatch squeue scancel sinfo taskset python3; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/install-deps.sh installs slurm-wlm and munge)"
done

work=$(mktemp -d /tmp/ka-slurm.XXXXXX)
chmod 755 "$work"
pids=()
stop_daemons() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  # Job processes slurmd left behind (a test that failed half-way): they run ka-tune from here.
  pkill -9 -f "$work/" 2>/dev/null || true
  rm -rf "$work"
}
trap stop_daemons EXIT

fail() {
  echo "FAIL: $*"
  for f in "$work"/log/*.log "$work"/*/logs/*.log; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }
  done
  exit 1
}

# Two free TCP ports for slurmctld and slurmd.
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')

user=$(id -un)
cpus=$(nproc)
mkdir -p "$work/munge" "$work/state" "$work/spool" "$work/log"
chmod 700 "$work/munge"
cat > "$work/slurm.conf" <<EOF
ClusterName=ka-test
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$work/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=5
MinJobAge=10
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=ka Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$work/slurm.conf

# ---- the cluster ----
mungekey --create --keyfile="$work/munge/munge.key" >/dev/null 2>&1 || skip "mungekey could not create a key"
chmod 600 "$work/munge/munge.key"
munged -F -f --socket="$work/munge/munge.sock" --key-file="$work/munge/munge.key" \
  --pid-file="$work/munge/munged.pid" --seed-file="$work/munge/seed" \
  --log-file="$work/log/munged.log" >"$work/log/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$work/munge/munge.sock" ] && break; sleep 0.1; done
[ -S "$work/munge/munge.sock" ] || skip "munged did not start: $(tail -n 3 "$work/log/munged.log" 2>/dev/null)"
slurmctld -D -i -f "$SLURM_CONF" >"$work/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" >"$work/log/slurmd.out" 2>&1 &
pids+=($!)
ready=0
for _ in $(seq 120); do
  if [ "$(sinfo -h -n localhost -o %t 2>/dev/null)" = "idle" ]; then ready=1; break; fi
  sleep 0.5
done
[ "$ready" -eq 1 ] || skip "the one-node cluster did not come up: $(tail -n 3 "$work/log/slurmctld.log" "$work/log/slurmd.log" "$work"/log/*.out 2>/dev/null)"
echo "cluster up: $cpus CPU(s), slurmctld :$ctld_port, slurmd :$slurmd_port"

# ---- helpers ----
work_args=(--op aten::mm --shapes 96x32x24,32x32x32,64x48x16 --strategy exhaustive
           --config-budget 0.005 --trial-timeout 60)
slurm_args=(--slurm 4 --cpus-per-shard 1 --time 10)

# The campaign's job ids (its `jobs` file).
jobs_of() { cat "$1/jobs"; }

# Waits (at most $2 s) until none of campaign folder $1's jobs is queued or running.
wait_jobs() {
  local ids
  ids=$(jobs_of "$1")
  for _ in $(seq $(( $2 * 2 ))); do
    [ -z "$(squeue -h -o %i -j "$ids" 2>/dev/null)" ] && return 0
    sleep 0.5
  done
  squeue
  fail "campaign $1: jobs $ids still queued after $2 s"
}

q() { "$sqlite" "$1" "$2"; }

# Sorted "shape_key|kernel|version|config|cache_state" of every trial in database $1.
trial_set() { q "$1" "SELECT shape_key||'|'||kernel||'|'||kernel_version||'|'||config||'|'||cache_state FROM trials" | sort; }

# Checks that campaign database $1 holds each trial once, the same set as the reference and a
# recommendation for every shape.
check_merged() {
  local db=$1 shards_total=$2
  local n distinct
  n=$(q "$db" "SELECT count(*) FROM trials")
  distinct=$(trial_set "$db" | uniq | wc -l)
  [ "$n" -eq "$distinct" ] || fail "$db: $n trials, of which $distinct distinct: a trial was stored twice"
  [ "$n" -eq "$shards_total" ] || fail "$db: $n trials merged, the shards hold $shards_total"
  diff <(trial_set "$db") "$work/reference.txt" >"$work/diff.txt" ||
    fail "$db: trials differ from the unsharded sweep's: $(head -n 5 "$work/diff.txt")"
  local shapes recs
  shapes=$(q "$db" "SELECT count(DISTINCT shape_key) FROM trials")
  recs=$(q "$db" "SELECT count(DISTINCT shape_key) FROM recommendations WHERE op = 'aten::mm'")
  [ "$shapes" -eq 3 ] && [ "$recs" -eq 3 ] || fail "$db: $recs recommendation(s) for $shapes shape(s)"
}

shard_trials() {
  local total=0 i n
  for i in 0 1 2 3; do
    n=$(q "$1/shard-$i.db" "SELECT count(*) FROM trials")
    total=$((total + n))
  done
  echo "$total"
}

cd "$work"

# ---- the unsharded reference, on one core like each shard ----
taskset -c 0 "$ka_tune" "${work_args[@]}" --db "$work/reference.db" -q >"$work/log/reference.out" 2>&1 ||
  fail "the unsharded ka-tune failed: $(tail -n 5 "$work/log/reference.out")"
trial_set "$work/reference.db" >"$work/reference.txt"
echo "reference: $(wc -l <"$work/reference.txt") trials"

# ---- 1. a whole campaign ----
"$ka_tune" "${work_args[@]}" --db "$work/one.db" "${slurm_args[@]}" >"$work/log/submit1.out" 2>&1 ||
  fail "ka-tune --slurm: $(cat "$work/log/submit1.out")"
grep -q "shards 0-3 of 4 submitted as job array" "$work/log/submit1.out" ||
  fail "unexpected submission: $(cat "$work/log/submit1.out")"
wait_jobs "$work/one.db.campaign" 300
[ -f "$work/one.db.campaign/merged" ] || fail "campaign 1 was not merged"
grep -q "device cpu|" "$work/one.db.campaign/logs/merge.log" ||
  fail "the merge job did not print the devices' tables"
grep -q "cores 0$\|cores 1$" "$work/one.db.campaign/logs/shard-0.log" ||
  fail "shard 0 was not bound to one core: $(head -n 1 "$work/one.db.campaign/logs/shard-0.log")"
check_merged "$work/one.db" "$(shard_trials "$work/one.db.campaign")"
# A shard tuned on one core: its fingerprint says so.
q "$work/one.db" "SELECT DISTINCT fingerprint FROM runs" | grep -q "|cores=1|" ||
  fail "the shards' fingerprint is not of one core: $(q "$work/one.db" "SELECT DISTINCT fingerprint FROM runs")"
# Submitting a finished campaign again submits nothing.
"$ka_tune" "${work_args[@]}" --db "$work/one.db" "${slurm_args[@]}" >"$work/log/submit1b.out" 2>&1
grep -q "nothing to submit" "$work/log/submit1b.out" || fail "resubmitting a finished campaign: $(cat "$work/log/submit1b.out")"
echo "1. campaign: $(q "$work/one.db" "SELECT count(*) FROM trials") trials merged, as unsharded"

# ---- 1b. shards of another device merged into the same database: tables kept apart ----
# Shards bound to every core have another fingerprint (cores=$cpus) than one-core shards.
if [ "$cpus" -ge 2 ]; then
  "$ka_tune" --op aten::relu --shapes 1024,2048 --strategy exhaustive --config-budget 0.005 \
    --db "$work/one.db" --campaign "$work/all-cores" --slurm 2 --cpus-per-shard "$cpus" --time 10 \
    >"$work/log/submit1c.out" 2>&1 || fail "ka-tune --slurm: $(cat "$work/log/submit1c.out")"
  wait_jobs "$work/all-cores" 300
  [ -f "$work/all-cores/merged" ] || fail "the all-cores campaign was not merged"
  devices=$(q "$work/one.db" "SELECT count(DISTINCT fingerprint) FROM recommendations")
  [ "$devices" -eq 2 ] || fail "one.db holds recommendations of $devices device(s), expected 2"
  listed=$("$ka_db" show --db "$work/one.db" --recommendations | grep -c "^  device cpu|")
  [ "$listed" -eq 2 ] || fail "ka-db show lists $listed device table(s), expected 2"
  q "$work/one.db" "SELECT count(*) FROM recommendations WHERE op = 'aten::relu' AND fingerprint LIKE '%|cores=$cpus|%'" |
    grep -qx 2 || fail "the all-cores device's relu recommendations are missing"
  echo "1b. a second device's campaign merged into the same database: 2 device tables"
fi

# ---- 2. cancelled half-way, then submitted again ----
# Each shard stops itself (SIGSTOP) after storing `stop` trials (Note [Stopping after N trials
# for tests]): shard 0 (half a shape) finishes below it, a whole shape's shard does not (it
# stops after its `stop`-th trial, at the latest before its finals). How many trials each
# stores depends on the ISA path (how many configurations it runs, how many are distinct), so
# the counts come from campaign 1.
first=$(q "$work/one.db.campaign/shard-0.db" "SELECT count(*) FROM trials")
biggest=$(for i in 1 2 3; do q "$work/one.db.campaign/shard-$i.db" "SELECT count(*) FROM trials"; done | sort -n | tail -n 1)
stop=$((first + 1))
[ "$stop" -le "$biggest" ] || fail "shard 0 ($first trials) is not smaller than the biggest shard ($biggest)"
camp="$work/two.db.campaign"
KA_TEST_STOP_AFTER_TRIALS=$stop "$ka_tune" "${work_args[@]}" --db "$work/two.db" "${slurm_args[@]}" \
  >"$work/log/submit2.out" 2>&1 || fail "ka-tune --slurm: $(cat "$work/log/submit2.out")"
stopped=""
for _ in $(seq 600); do
  if [ -f "$camp/shard-0.done" ]; then
    for i in 1 2 3; do
      if [ -f "$camp/shard-$i.db" ] &&
         [ "$(q "$camp/shard-$i.db" "SELECT count(*) FROM trials" 2>/dev/null || echo 0)" -ge "$stop" ]; then
        stopped=$i
      fi
    done
  fi
  [ -n "$stopped" ] && break
  sleep 0.5
done
[ -n "$stopped" ] || fail "campaign 2 did not reach the stop point"
scancel "$(jobs_of "$camp" | cut -d, -f1)" "$(jobs_of "$camp" | cut -d, -f2)"
wait_jobs "$camp" 120
[ -f "$camp/shard-$stopped.done" ] && fail "shard $stopped finished although it was cancelled"
unfinished=()
for i in 0 1 2 3; do [ -f "$camp/shard-$i.done" ] || unfinished+=("$i"); done
"$ka_tune" "${work_args[@]}" --db "$work/two.db" "${slurm_args[@]}" >"$work/log/submit2b.out" 2>&1 ||
  fail "resubmitting: $(cat "$work/log/submit2b.out")"
grep -q "job array" "$work/log/submit2b.out" || fail "resubmitting: $(cat "$work/log/submit2b.out")"
submitted=$(sed -n 's/.*: shards \([0-9,-]*\) of 4 submitted.*/\1/p' "$work/log/submit2b.out")
expected=$(python3 -c '
import sys
v = [int(x) for x in sys.argv[1:]]
out, i = [], 0
while i < len(v):
    j = i
    while j + 1 < len(v) and v[j + 1] == v[j] + 1: j += 1
    out.append(str(v[i]) if i == j else "%d-%d" % (v[i], v[j])); i = j + 1
print(",".join(out))' "${unfinished[@]}")
[ "$submitted" = "$expected" ] || fail "resubmitted shards '$submitted', unfinished were '$expected'"
wait_jobs "$camp" 300
[ -f "$camp/merged" ] || fail "campaign 2 was not merged after resubmission"
runs=$(q "$camp/shard-$stopped.db" "SELECT count(*) FROM runs")
[ "$runs" -eq 2 ] || fail "shard $stopped holds $runs run(s); expected the cancelled one and its resumption"
check_merged "$work/two.db" "$(shard_trials "$camp")"
echo "2. cancelled with shards ${unfinished[*]} unfinished (shard $stopped stopped at $stop trials); resubmitted $submitted; merged as unsharded"

# ---- 3. a shard that fails ----
camp="$work/three.db.campaign"
mkdir -p "$camp/shard-1.db"  # a folder where shard 1's database should go: ka-tune refuses it
"$ka_tune" --op aten::relu --shapes 1024,2048,4096,8192 --strategy exhaustive --config-budget 0.005 \
  --db "$work/three.db" "${slurm_args[@]}" >"$work/log/submit3.out" 2>&1 ||
  fail "ka-tune --slurm: $(cat "$work/log/submit3.out")"
wait_jobs "$camp" 300
grep -q "shard 1/4 did not finish; its log: $camp/logs/shard-1.log" "$camp/logs/merge.log" ||
  fail "the merge job did not name the failed shard: $(cat "$camp/logs/merge.log")"
grep -q "nothing merged" "$camp/logs/merge.log" || fail "merge log: $(cat "$camp/logs/merge.log")"
[ ! -e "$work/three.db" ] || fail "a failed campaign left $work/three.db behind"
[ ! -e "$camp/merged" ] || fail "a failed campaign is marked merged"
grep -q "shard-1.db" "$camp/logs/shard-1.log" || fail "shard 1's log does not say why: $(cat "$camp/logs/shard-1.log")"
echo "3. failed shard named by the merge job; nothing merged"
echo "PASS"
