// Claims on trials under way: concurrent sweeps of the same work on one database measure each
// configuration once (Note [Shared trials] in trial_claims.cpp).
#pragma once

#include <ka/db/sqlite.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace ka::db {

/// One configuration of one kernel on one shape and device: what a sweep measures once.
struct TrialKey {
  std::string fingerprint;  ///< DeviceFingerprint::key() of the runs that may share it.
  std::string op;
  std::string shape_key;
  std::string kernel;
  int kernel_version = 0;
  std::string cache_state = "hot";
  std::string config;  ///< LaunchConfig canonical form.
};

/// How claims are judged.
struct ClaimPolicy {
  /// A stored crashed, timed-out or failed trial of a run that has ended is not a result: the
  /// configuration is claimed and run again (ka-tune --retry-failed).
  bool retry_failed = false;
  /// A claim older than this is taken over even when its run still reads 'running': the claim
  /// of a process on another host, which cannot be looked at from here, that died.
  double stale_after_s = 600.0;
};

/// What claim_trial() found.
struct ClaimState {
  enum class Kind {
    kOurs,      ///< Claimed for the caller's run: measure it and store the trial.
    kMeasured,  ///< A trial is stored already: `median_ns` is its result.
    kHeld,      ///< Another live run measures it now: `holder`.
  };
  Kind kind = Kind::kOurs;
  std::optional<double> median_ns;  ///< kMeasured: nullopt when it did not run ok.
  std::int64_t holder = 0;          ///< kHeld: the run holding the claim.
};

/// In one BEGIN IMMEDIATE transaction: the trial of `key` stored by any run of its fingerprint
/// (the latest), else the claim of another run that is 'running' and not stale, else a claim
/// for `run_id` (a claim of an ended or stale run is taken over). Throws ka::DbError.
ClaimState claim_trial(Connection& db, std::int64_t run_id, const TrialKey& key,
                       const ClaimPolicy& policy);

/// claim_trial() until the trial is the caller's to run (kOurs) or stored by its holder
/// (kMeasured), polling while another run holds it; runs that died on this host are marked
/// 'abandoned' on the way (mark_abandoned_runs), so their claims are taken over. A stop signal
/// (ka::InterruptScope) throws ka::Interrupted. Never returns kHeld.
ClaimState claim_or_wait(Connection& db, std::int64_t run_id, const TrialKey& key,
                         const ClaimPolicy& policy);

/// Drops `run_id`'s claim on `key` (work done that leaves no trial row: a shape's finals).
void release_claim(Connection& db, std::int64_t run_id, const TrialKey& key);

}  // namespace ka::db
