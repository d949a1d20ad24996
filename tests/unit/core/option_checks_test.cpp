#include <ka/core/error.hpp>
#include <ka/core/option_checks.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace ka {
namespace {

// The message of the ka::ValueError `f` throws, or "" when it throws none.
template <typename F>
std::string value_error_of(F&& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

TEST(OptionChecks, WholeNumbersRefuseNegativesAndText) {
  EXPECT_EQ(whole_number_error("0", 0), "");
  EXPECT_EQ(whole_number_error("17", 1), "");
  EXPECT_EQ(whole_number_error("-1", 0), "'-1' is not a whole number >= 0");
  EXPECT_EQ(whole_number_error("0", 1), "'0' is not a whole number >= 1");
  EXPECT_EQ(whole_number_error("1.5", 0), "'1.5' is not a whole number >= 0");
  EXPECT_EQ(whole_number_error("", 0), "'' is not a whole number >= 0");
}

TEST(OptionChecks, FiniteNumbersRefuseNanInfAndNegatives) {
  EXPECT_EQ(finite_number_error("0.5", false), "");
  EXPECT_EQ(finite_number_error("0", true), "");
  EXPECT_EQ(finite_number_error("0", false), "'0' is not a finite number > 0");
  EXPECT_EQ(finite_number_error("-5", false), "'-5' is not a finite number > 0");
  EXPECT_EQ(finite_number_error("nan", true), "'nan' is not a finite number >= 0");
  EXPECT_EQ(finite_number_error("inf", false), "'inf' is not a finite number > 0");
  EXPECT_EQ(finite_number_error("3s", false), "'3s' is not a finite number > 0");
}

TEST(OptionChecks, ThreadCountsAreBounded) {
  EXPECT_GE(max_threads(), 4);
  EXPECT_LE(max_threads(), 1024);
  EXPECT_EQ(thread_count_error("0"), "");
  EXPECT_EQ(thread_count_error(std::to_string(max_threads())), "");
  const std::string too_many = thread_count_error("100000");
  EXPECT_NE(too_many.find("'100000' is not a thread count from 0 (all cores) to " +
                          std::to_string(max_threads())),
            std::string::npos)
      << too_many;
  EXPECT_NE(thread_count_error("-2"), "");
}

TEST(OptionChecks, KaNumThreadsOutOfRangeIsAnError) {
  {
    const ScopedEnv env("KA_NUM_THREADS", "2");
    EXPECT_EQ(env_thread_limit(), 2);
  }
  for (const char* bad : {"0", "-1", "abc", "100000"}) {
    SCOPED_TRACE(bad);
    const ScopedEnv env("KA_NUM_THREADS", bad);
    const std::string message = value_error_of([] { check_environment(); });
    EXPECT_NE(message.find(std::string("KA_NUM_THREADS='") + bad +
                           "': expected a whole number of threads from 1 to " +
                           std::to_string(max_threads())),
              std::string::npos)
        << message;
  }
  EXPECT_EQ(env_thread_limit(), 0) << "unset";
}

TEST(OptionChecks, KaPackedWeightsMibIsAWholeNumberOfMib) {
  EXPECT_EQ(env_packed_weights_bytes(), std::int64_t{1024} << 20) << "unset: 1 GiB";
  {
    const ScopedEnv env("KA_PACKED_WEIGHTS_MIB", "0");
    EXPECT_EQ(env_packed_weights_bytes(), 0);
  }
  {
    const ScopedEnv env("KA_PACKED_WEIGHTS_MIB", "3");
    EXPECT_EQ(env_packed_weights_bytes(), std::int64_t{3} << 20);
  }
  for (const char* bad : {"-1", "1.5", "lots", "9999999999999"}) {
    SCOPED_TRACE(bad);
    const ScopedEnv env("KA_PACKED_WEIGHTS_MIB", bad);
    const std::string message = value_error_of([] { check_environment(); });
    EXPECT_NE(message.find(std::string("KA_PACKED_WEIGHTS_MIB='") + bad +
                           "': expected a whole number of MiB from 0"),
              std::string::npos)
        << message;
  }
}

TEST(OptionChecks, KaLogLevelMustNameALevel) {
  EXPECT_EQ(log_level_from_name("warn"), spdlog::level::warn);
  EXPECT_EQ(log_level_from_name("off"), spdlog::level::off);
  EXPECT_FALSE(log_level_from_name("bogus").has_value());
  const ScopedEnv env("KA_LOG_LEVEL", "bogus");
  EXPECT_EQ(value_error_of([] { check_environment(); }),
            std::string("KA_LOG_LEVEL='bogus': expected one of ") + kLogLevelNames);
}

TEST(OptionChecks, DatabaseMustBeAFile) {
  EXPECT_EQ(value_error_of([] { require_database_file("--db", "ka.db"); }), "");
  for (const char* bad : {"", ":memory:"}) {
    const std::string message = value_error_of([bad] { require_database_file("--db", bad); });
    EXPECT_EQ(message.rfind(std::string("--db '") + bad + "': the results go to this database", 0),
              0u)
        << message;
  }
}

}  // namespace
}  // namespace ka
