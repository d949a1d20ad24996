// Claims on trials (Note [Shared trials]): two runs of the same work measure each configuration
// once; a claim of a run that ended, died or went stale is taken over.
#include <ka/core/interrupt.hpp>
#include <ka/db/results_store.hpp>
#include <ka/db/trial_claims.hpp>

#include <gtest/gtest.h>

#include <scratch_dir.hpp>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>

namespace ka::db {
namespace {

using Kind = ClaimState::Kind;

RunInfo run_info(const std::string& fingerprint) {
  RunInfo info;
  info.tool = "ka-tune";
  info.command_line = "ka-tune";
  info.host = "h";
  info.ka_version = "0";
  info.git_sha = "abc";
  info.device = "cpu";
  info.fingerprint = fingerprint;
  info.fingerprint_json = "{}";
  return info;
}

TrialKey key_of(const std::string& config) {
  TrialKey k;
  k.fingerprint = "cpu|x";
  k.op = "aten::mm";
  k.shape_key = "aten::mm(f32[8,8]c,f32[8,8]c)";
  k.kernel = "gemm";
  k.kernel_version = 3;
  k.cache_state = "hot";
  k.config = config;
  return k;
}

TrialRow trial_of(const TrialKey& k, Disposition d, double median_ns) {
  TrialRow t;
  t.op = k.op;
  t.shape_key = k.shape_key;
  t.kernel = k.kernel;
  t.kernel_version = k.kernel_version;
  t.config = k.config;
  t.cache_state = k.cache_state;
  t.disposition = d;
  if (d == Disposition::kOk) t.median_ns = median_ns;
  if (d != Disposition::kOk) t.error = "boom";
  t.repetitions = 5;
  return t;
}

std::int64_t claims(Connection& db) {
  auto st = db.prepare("SELECT count(*) FROM trial_claims");
  st.step();
  return st.column_int64(0);
}

class TrialClaimsTest : public ::testing::Test {
 protected:
  test::ScratchDir dir_;
  ResultsStore store_{dir_.path("ka.db")};
  Connection& db_ = store_.connection();
  ClaimPolicy policy_;
};

TEST_F(TrialClaimsTest, SecondRunWaitsForTheFirstsTrialAndTakesIt) {
  const auto a = store_.begin_run(run_info("cpu|x"));
  const auto b = store_.begin_run(run_info("cpu|x"));
  const TrialKey k = key_of("mr=4 nr=16");

  EXPECT_EQ(claim_trial(db_, a, k, policy_).kind, Kind::kOurs);
  EXPECT_EQ(claim_trial(db_, a, k, policy_).kind, Kind::kOurs) << "claiming its own claim again";
  const ClaimState held = claim_trial(db_, b, k, policy_);
  EXPECT_EQ(held.kind, Kind::kHeld);
  EXPECT_EQ(held.holder, a);
  // Another configuration, shape or device is free.
  EXPECT_EQ(claim_trial(db_, b, key_of("mr=8 nr=16"), policy_).kind, Kind::kOurs);
  TrialKey other_device = k;
  other_device.fingerprint = "cpu|y";
  EXPECT_EQ(claim_trial(db_, b, other_device, policy_).kind, Kind::kOurs);

  store_.add_trials(a, {trial_of(k, Disposition::kOk, 1234.5)});
  const ClaimState measured = claim_trial(db_, b, k, policy_);
  EXPECT_EQ(measured.kind, Kind::kMeasured);
  ASSERT_TRUE(measured.median_ns.has_value());
  EXPECT_DOUBLE_EQ(*measured.median_ns, 1234.5);
}

TEST_F(TrialClaimsTest, AWrongOrFailedTrialIsAResultWithoutATime) {
  const auto a = store_.begin_run(run_info("cpu|x"));
  const auto b = store_.begin_run(run_info("cpu|x"));
  const TrialKey k = key_of("mr=4 nr=16");
  store_.add_trials(a, {trial_of(k, Disposition::kIncorrect, 0)});
  const ClaimState s = claim_trial(db_, b, k, policy_);
  EXPECT_EQ(s.kind, Kind::kMeasured);
  EXPECT_FALSE(s.median_ns.has_value());
}

TEST_F(TrialClaimsTest, ClaimsOfAnEndedRunAreReleasedOrTakenOver) {
  const auto a = store_.begin_run(run_info("cpu|x"));
  const auto b = store_.begin_run(run_info("cpu|x"));
  ASSERT_EQ(claim_trial(db_, a, key_of("c1"), policy_).kind, Kind::kOurs);
  ASSERT_EQ(claim_trial(db_, a, key_of("c2"), policy_).kind, Kind::kOurs);
  EXPECT_EQ(claims(db_), 2);
  store_.finish_run(a, false);  // interrupted before it stored either trial
  EXPECT_EQ(claims(db_), 0);
  EXPECT_EQ(claim_trial(db_, b, key_of("c1"), policy_).kind, Kind::kOurs);

  // A claim left by a run that reads 'abandoned' (its row was not cleaned) is taken over.
  const auto c = store_.begin_run(run_info("cpu|x"));
  ASSERT_EQ(claim_trial(db_, c, key_of("c3"), policy_).kind, Kind::kOurs);
  db_.prepare("UPDATE runs SET status = 'abandoned' WHERE id = ?").bind(1, c).run();
  EXPECT_EQ(claim_trial(db_, b, key_of("c3"), policy_).kind, Kind::kOurs);
  release_claim(db_, b, key_of("c3"));
  EXPECT_EQ(claims(db_), 1) << "b's claim on c1 stays";
  store_.finish_run(b, true);
  EXPECT_EQ(claims(db_), 0);
}

TEST_F(TrialClaimsTest, AStaleClaimIsTakenOver) {
  const auto a = store_.begin_run(run_info("cpu|x"));
  const auto b = store_.begin_run(run_info("cpu|x"));
  ASSERT_EQ(claim_trial(db_, a, key_of("c1"), policy_).kind, Kind::kOurs);
  EXPECT_EQ(claim_trial(db_, b, key_of("c1"), policy_).kind, Kind::kHeld);
  db_.exec("UPDATE trial_claims SET claimed_at = claimed_at - 3600");
  EXPECT_EQ(claim_trial(db_, b, key_of("c1"), policy_).kind, Kind::kOurs)
      << "a claim an hour old, of a holder that cannot be looked at";
}

TEST_F(TrialClaimsTest, RetryFailedRerunsOldFailuresButTakesAConcurrentOne) {
  const auto old = store_.begin_run(run_info("cpu|x"));
  store_.add_trials(old, {trial_of(key_of("c1"), Disposition::kCrashed, 0)});
  store_.finish_run(old, true);
  const auto concurrent = store_.begin_run(run_info("cpu|x"));
  store_.add_trials(concurrent, {trial_of(key_of("c2"), Disposition::kTimeout, 0)});
  const auto me = store_.begin_run(run_info("cpu|x"));

  EXPECT_EQ(claim_trial(db_, me, key_of("c1"), policy_).kind, Kind::kMeasured)
      << "without --retry-failed a crash is a result";
  ClaimPolicy retry;
  retry.retry_failed = true;
  EXPECT_EQ(claim_trial(db_, me, key_of("c1"), retry).kind, Kind::kOurs);
  EXPECT_EQ(claim_trial(db_, me, key_of("c2"), retry).kind, Kind::kMeasured)
      << "a run still sweeping just measured it";
}

TEST_F(TrialClaimsTest, WaitingEndsWhenTheHolderStoresItsTrial) {
  const auto a = store_.begin_run(run_info("cpu|x"));
  const auto b = store_.begin_run(run_info("cpu|x"));
  const TrialKey k = key_of("c1");
  ASSERT_EQ(claim_trial(db_, a, k, policy_).kind, Kind::kOurs);
  // The holder stores its trial from another connection, as another process would.
  std::thread holder([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    ResultsStore other(dir_.path("ka.db"));
    other.add_trials(a, {trial_of(k, Disposition::kOk, 42.0)});
  });
  const auto start = std::chrono::steady_clock::now();
  const ClaimState s = claim_or_wait(db_, b, k, policy_);
  const double waited_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  holder.join();
  EXPECT_EQ(s.kind, Kind::kMeasured);
  ASSERT_TRUE(s.median_ns.has_value());
  EXPECT_DOUBLE_EQ(*s.median_ns, 42.0);
  EXPECT_GE(waited_s, 0.1);
}

TEST_F(TrialClaimsTest, WaitingEndsWhenTheHoldersProcessIsGone) {
  const auto a = store_.begin_run(run_info("cpu|x"));
  const auto b = store_.begin_run(run_info("cpu|x"));
  const TrialKey k = key_of("c1");
  ASSERT_EQ(claim_trial(db_, a, k, policy_).kind, Kind::kOurs);
  // The holder's writer is this process's pid with another start time: a process that died
  // and whose pid was reused (Note [Abandoned runs]).
  db_.prepare("UPDATE runs SET pid_start = pid_start + 1 WHERE id = ?").bind(1, a).run();
  const ClaimState s = claim_or_wait(db_, b, k, policy_);
  EXPECT_EQ(s.kind, Kind::kOurs);
  auto st = db_.prepare("SELECT status FROM runs WHERE id = ?");
  st.bind(1, a);
  ASSERT_TRUE(st.step());
  EXPECT_EQ(st.column_text(0), "abandoned");
}

TEST_F(TrialClaimsTest, AStopSignalEndsTheWait) {
  const auto a = store_.begin_run(run_info("cpu|x"));
  const auto b = store_.begin_run(run_info("cpu|x"));
  const TrialKey k = key_of("c1");
  ASSERT_EQ(claim_trial(db_, a, k, policy_).kind, Kind::kOurs);
  const InterruptScope scope;
  std::thread signaller([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::raise(SIGTERM);
  });
  try {
    (void)claim_or_wait(db_, b, k, policy_);
    ADD_FAILURE() << "claim_or_wait returned while the holder still ran";
  } catch (const Interrupted& e) {
    EXPECT_EQ(e.signal_number(), SIGTERM);
  }
  signaller.join();
}

}  // namespace
}  // namespace ka::db
