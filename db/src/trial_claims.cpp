#include <ka/core/interrupt.hpp>
#include <ka/db/run_liveness.hpp>
#include <ka/db/trial_claims.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

// Note [Shared trials]
// Two sweeps of the same work on one database (two ka-tune commands started alike, or a
// second one started while the first runs) must not measure each configuration twice: besides
// the wasted time, two measurements on the same cores at once disturb each other. Before it
// runs a configuration, a sweep calls claim_or_wait():
//  - a trial of that (device fingerprint, op, shape key, kernel, version, cache state, config)
//    stored by any run is the result: it is taken as is, as a resumed sweep takes its own;
//  - else a claim row in `trial_claims` held by another run whose status is 'running' means
//    "measuring now": the caller polls (10 ms, growing to 100 ms) until that trial is stored,
//    the holder's run ends, or its process dies (mark_abandoned_runs, once a second, marks a
//    dead holder on this host 'abandoned'); the holder's result is then the caller's too;
//  - else the caller claims it, measures it and stores the trial; its claims are released
//    when its run ends (ResultsStore::finish_run; a killed run's are taken over by the next
//    claim_trial).
// Each check-and-claim is one BEGIN IMMEDIATE transaction, so two sweeps never both claim one
// configuration. A claim is taken over once the holder's run is not 'running' (finished,
// failed, interrupted or abandoned) or after ClaimPolicy::stale_after_s: a holder on another
// host cannot be seen from here. Two sweeps that walk the same points in the same order (one
// strategy, one seed) thus take turns: one measures, the other waits and takes the result,
// and the work is done once; sweeps in different orders split it. A shape's finals are claimed
// the same way under the config text "<finals>" (no LaunchConfig prints so): the sweep that
// gets the claim times them and releases it once its recommendation is stored; the other then
// adopts that recommendation (ShapeTuner::adopt_concurrent_finals in tune.cpp) instead of
// timing the same finalists again.

namespace ka::db {
namespace {

double unix_now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Binds `key`'s seven fields to parameters ?1 .. ?7 of `st`, in TrialKey's order.
Statement& bind_key(Statement& st, const TrialKey& key) {
  return st.bind(1, key.fingerprint)
      .bind(2, key.op)
      .bind(3, key.shape_key)
      .bind(4, key.kernel)
      .bind(5, key.kernel_version)
      .bind(6, key.cache_state)
      .bind(7, key.config);
}

// The latest stored trial of `key`: nullopt when none counts; inside, its median or nullopt
// when it did not run ok. With retry_failed, a crashed, timed-out or failed trial counts only
// when its run is still running (a concurrent sweep's fresh verdict, not an old one to retry).
std::optional<std::optional<double>> stored_trial(Connection& db, const TrialKey& key,
                                                  const ClaimPolicy& policy) {
  auto st = db.prepare(
      "SELECT t.disposition, t.median_ns, r.status FROM trials t JOIN runs r ON r.id = t.run_id "
      "WHERE r.fingerprint = ?1 AND t.op = ?2 AND t.shape_key = ?3 AND t.kernel = ?4 AND "
      "t.kernel_version = ?5 AND t.cache_state = ?6 AND t.config = ?7 ORDER BY t.id DESC");
  bind_key(st, key);
  while (st.step()) {
    const std::string disposition = st.column_text(0);
    const bool retryable =
        disposition == "crashed" || disposition == "timeout" || disposition == "failed";
    if (policy.retry_failed && retryable && st.column_text(2) != "running") continue;
    if (disposition == "ok" && !st.column_is_null(1)) {
      return std::optional<double>(st.column_double(1));
    }
    return std::optional<double>();
  }
  return std::nullopt;
}

// The run holding a live claim on `key` other than `run_id`, or nullopt.
std::optional<std::int64_t> live_holder(Connection& db, std::int64_t run_id, const TrialKey& key,
                                        const ClaimPolicy& policy) {
  auto st = db.prepare(
      "SELECT c.run_id, c.claimed_at, r.status FROM trial_claims c LEFT JOIN runs r ON "
      "r.id = c.run_id WHERE c.fingerprint = ?1 AND c.op = ?2 AND c.shape_key = ?3 AND "
      "c.kernel = ?4 AND c.kernel_version = ?5 AND c.cache_state = ?6 AND c.config = ?7");
  bind_key(st, key);
  if (!st.step()) return std::nullopt;
  const std::int64_t holder = st.column_int64(0);
  const bool running = !st.column_is_null(2) && st.column_text(2) == "running";
  const bool fresh = unix_now_s() - st.column_double(1) < policy.stale_after_s;
  if (holder == run_id || !running || !fresh) return std::nullopt;
  return holder;
}

}  // namespace

ClaimState claim_trial(Connection& db, std::int64_t run_id, const TrialKey& key,
                       const ClaimPolicy& policy) {
  Transaction tx(db);
  ClaimState state;
  if (const auto stored = stored_trial(db, key, policy)) {
    state.kind = ClaimState::Kind::kMeasured;
    state.median_ns = *stored;
  } else if (const auto holder = live_holder(db, run_id, key, policy)) {
    state.kind = ClaimState::Kind::kHeld;
    state.holder = *holder;
  } else {
    auto claim = db.prepare(
        "INSERT OR REPLACE INTO trial_claims (fingerprint, op, shape_key, kernel, "
        "kernel_version, cache_state, config, run_id, claimed_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, "
        "?7, ?8, ?9)");
    bind_key(claim, key).bind(8, run_id).bind(9, unix_now_s()).run();
  }
  tx.commit();
  return state;
}

ClaimState claim_or_wait(Connection& db, std::int64_t run_id, const TrialKey& key,
                         const ClaimPolicy& policy) {
  using Clock = std::chrono::steady_clock;
  auto pause = std::chrono::milliseconds(10);
  auto next_liveness_check = Clock::now() + std::chrono::seconds(1);
  for (;;) {
    const ClaimState state = claim_trial(db, run_id, key, policy);
    if (state.kind != ClaimState::Kind::kHeld) return state;
    if (const int sig = interrupt_signal(); sig != 0) throw Interrupted(sig);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
    if (Clock::now() >= next_liveness_check) {
      mark_abandoned_runs(db);
      next_liveness_check = Clock::now() + std::chrono::seconds(1);
    }
  }
}

void release_claim(Connection& db, std::int64_t run_id, const TrialKey& key) {
  Transaction tx(db);
  auto drop = db.prepare(
      "DELETE FROM trial_claims WHERE fingerprint = ?1 AND op = ?2 AND shape_key = ?3 AND "
      "kernel = ?4 AND kernel_version = ?5 AND cache_state = ?6 AND config = ?7 AND run_id = ?8");
  bind_key(drop, key).bind(8, run_id).run();
  tx.commit();
}

}  // namespace ka::db
