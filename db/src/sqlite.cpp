#include <ka/core/error.hpp>
#include <ka/core/logging.hpp>
#include <ka/db/sqlite.hpp>

#include <ka/core/text.hpp>

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>

// Wraps one SQLite call (STYLE.md, "Errors"): "<file>:<line>: SQLite call failed: <name>:
// <text> / call: '<expr>'", plus the database path.
#define KA_SQLITE_CHECK(db, expr)                                                          \
  do {                                                                                     \
    const int ka_sqlite_rc_ = (expr);                                                      \
    if (ka_sqlite_rc_ != SQLITE_OK) {                                                      \
      KA_THROW(::ka::DbError, (db).path(), ": ", ::ka::detail::source_location(__FILE__, __LINE__), \
               ": SQLite call failed: ", sqlite3_errstr(ka_sqlite_rc_), ": ",             \
               sqlite3_errmsg((db).handle()), " / call: '" #expr "'");                     \
    }                                                                                      \
  } while (false)

namespace ka::db {

// Note [Hardened connections]
// A database file may come from another machine or another person, so every connection is
// opened as if the file were hostile, before any SQL runs:
//  - SQLITE_DBCONFIG_DEFENSIVE: no writable_schema, no journal_mode=OFF, no shadow-table
//    writes, so SQL cannot corrupt the file on purpose;
//  - SQLITE_DBCONFIG_TRUSTED_SCHEMA off: functions with side effects never run from the schema
//    (views, triggers, CHECK and DEFAULT expressions, generated columns);
//  - extension loading off (sqlite3_load_extension() and load_extension() in SQL);
//  - SQLITE_DBCONFIG_ENABLE_TRIGGER and SQLITE_DBCONFIG_ENABLE_VIEW off: triggers never fire
//    and a view in the file cannot be queried. ka itself never creates a trigger or a view
//    (kMigrations has none), so nothing ka does needs them.
// Plain-SQL triggers would still run with only trusted_schema off, and a recursive view
// would still hang a query through it, which is why the schema checks (see Note [Checked
// databases] in schema.cpp) also refuse any file that holds a trigger or a view at all.
//
// Note [Waiting for the write lock]
// SQLite's own busy timeout gives up after a fixed time and the write fails with "database is
// locked", so a long `ka-db merge` (one transaction by design) made a concurrent ka-tune fail
// and a concurrent ka-bench lose rows. Instead the busy handler sleeps 1, 2, 4, ... ms, at most
// 250 ms a time, until busy_timeout_ms() has passed (10 minutes unless KA_DB_BUSY_TIMEOUT_MS
// says otherwise), and logs once when it has waited 10 s, so a person sees why a tool seems
// stuck. Writers take the lock with BEGIN IMMEDIATE (Transaction), where SQLite calls the
// handler; a read transaction is never upgraded to a write one, the case where it would not.

struct Connection::BusyWait {
  std::string path;
  int limit_ms = kDefaultBusyTimeoutMs;
  std::chrono::steady_clock::time_point since;
  bool logged = false;
};

namespace {

constexpr int kLogAfterMs = 10 * 1000;
constexpr int kMaxSleepMs = 250;

// sqlite3_busy_handler callback: nonzero to try again, zero to fail with SQLITE_BUSY.
int wait_for_lock(void* arg, int attempt) {
  auto* wait = static_cast<Connection::BusyWait*>(arg);
  const auto now = std::chrono::steady_clock::now();
  if (attempt == 0) {
    wait->since = now;
    wait->logged = false;
  }
  const auto waited_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now - wait->since).count();
  if (waited_ms >= wait->limit_ms) return 0;
  if (!wait->logged && waited_ms >= kLogAfterMs) {
    wait->logged = true;
    log().warn("{}: waiting for another process's lock on the database ({} s so far, giving up "
               "after {} s; KA_DB_BUSY_TIMEOUT_MS sets the limit)",
               wait->path, waited_ms / 1000, wait->limit_ms / 1000);
  }
  const long long sleep_ms = std::min<long long>(
      {1LL << std::min(attempt, 8), kMaxSleepMs, wait->limit_ms - waited_ms});
  std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  return 1;
}

// See Note [Hardened connections]. Every switch is set before the first statement runs.
void harden(sqlite3* db, const std::string& path) {
  struct Switch {
    int op;
    int value;
    const char* name;
  };
  static constexpr Switch kSwitches[] = {
      {SQLITE_DBCONFIG_DEFENSIVE, 1, "SQLITE_DBCONFIG_DEFENSIVE"},
      {SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, "SQLITE_DBCONFIG_TRUSTED_SCHEMA"},
      {SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, "SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION"},
      {SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, "SQLITE_DBCONFIG_ENABLE_TRIGGER"},
      {SQLITE_DBCONFIG_ENABLE_VIEW, 0, "SQLITE_DBCONFIG_ENABLE_VIEW"},
  };
  for (const Switch& s : kSwitches) {
    int now = -1;
    const int rc = sqlite3_db_config(db, s.op, s.value, &now);
    KA_CHECK_TYPE(DbError, rc == SQLITE_OK && now == s.value, "cannot harden database '", path,
                  "': sqlite3_db_config(", s.name, ", ", s.value, ") failed: ",
                  sqlite3_errstr(rc));
  }
}

}  // namespace

int busy_timeout_ms() {
  const char* env = std::getenv("KA_DB_BUSY_TIMEOUT_MS");
  if (env == nullptr || *env == '\0') return kDefaultBusyTimeoutMs;
  const auto value = parse_int64(env);
  KA_CHECK(value.has_value() && *value >= 0 && *value <= kMaxBusyTimeoutMs,
           "KA_DB_BUSY_TIMEOUT_MS='", env,
           "': expected a whole number of milliseconds from 0 to ", kMaxBusyTimeoutMs,
           " (one day)");
  return static_cast<int>(*value);
}

Connection::Connection(const std::string& path, Mode mode) : path_(path) {
  const int limit_ms = busy_timeout_ms();
  int flags = SQLITE_OPEN_FULLMUTEX;
  switch (mode) {
    case Mode::kReadWriteCreate:
      flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
      break;
    case Mode::kReadWrite:
      flags |= SQLITE_OPEN_READWRITE;
      break;
    case Mode::kReadOnly:
      flags |= SQLITE_OPEN_READONLY;
      break;
  }
  const int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string reason = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    KA_THROW(DbError, "cannot open database '", path, "': ", reason);
  }
  try {
    harden(db_, path);
  } catch (...) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw;
  }
  sqlite3_extended_result_codes(db_, 1);
  busy_ = std::make_unique<BusyWait>();
  busy_->path = path;
  busy_->limit_ms = limit_ms;
  sqlite3_busy_handler(db_, &wait_for_lock, busy_.get());
  try {
    // Reading the schema fails here (not later, half-way through a run) when the file is not
    // a database.
    exec("PRAGMA foreign_keys = ON");
    prepare("SELECT count(*) FROM sqlite_master").step();
  } catch (const DbError& e) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
    KA_THROW(DbError, "cannot use database '", path, "': ", e.what());
  }
}

Connection::~Connection() {
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

Connection::Connection(Connection&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)),
      path_(std::move(other.path_)),
      busy_(std::move(other.busy_)) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    if (db_ != nullptr) sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
    busy_ = std::move(other.busy_);
  }
  return *this;
}

void Connection::exec(std::string_view sql) {
  char* message = nullptr;
  const std::string text(sql);
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &message);
  if (rc != SQLITE_OK) {
    std::string reason = message != nullptr ? message : sqlite3_errstr(rc);
    sqlite3_free(message);
    KA_THROW(DbError, path_, ": SQL failed: ", reason, " / sql: '", text, "'");
  }
}

Statement Connection::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) {
    KA_THROW(DbError, path_, ": cannot prepare SQL: ", sqlite3_errmsg(db_), " / sql: '", sql, "'");
  }
  return Statement(*this, stmt);
}

std::int64_t Connection::last_insert_rowid() const noexcept {
  return sqlite3_last_insert_rowid(db_);
}

int Connection::user_version() {
  Statement st = prepare("PRAGMA user_version");
  st.step();
  return static_cast<int>(st.column_int64(0));
}

void Connection::set_user_version(int version) {
  exec("PRAGMA user_version = " + std::to_string(version));
}

Statement::~Statement() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)) {}

Statement& Statement::bind(int index, std::int64_t value) {
  KA_SQLITE_CHECK(*db_, sqlite3_bind_int64(stmt_, index, value));
  return *this;
}

Statement& Statement::bind(int index, double value) {
  KA_SQLITE_CHECK(*db_, sqlite3_bind_double(stmt_, index, value));
  return *this;
}

Statement& Statement::bind(int index, std::string_view value) {
  KA_SQLITE_CHECK(*db_, sqlite3_bind_text(stmt_, index, value.data(),
                                          static_cast<int>(value.size()), SQLITE_TRANSIENT));
  return *this;
}

Statement& Statement::bind(int index, const std::optional<double>& value) {
  return value.has_value() ? bind(index, *value) : bind_null(index);
}

Statement& Statement::bind_null(int index) {
  KA_SQLITE_CHECK(*db_, sqlite3_bind_null(stmt_, index));
  return *this;
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  KA_THROW(DbError, db_->path(), ": SQL step failed: ", sqlite3_errmsg(db_->handle()),
           " / sql: '", sqlite3_sql(stmt_), "'");
}

void Statement::run() {
  if (step()) {
    KA_THROW(DbError, db_->path(), ": statement returned rows where none were expected: '",
             sqlite3_sql(stmt_), "'");
  }
}

void Statement::reset() { sqlite3_reset(stmt_); }

std::int64_t Statement::column_int64(int index) const { return sqlite3_column_int64(stmt_, index); }
double Statement::column_double(int index) const { return sqlite3_column_double(stmt_, index); }
std::string Statement::column_text(int index) const {
  const auto* text = sqlite3_column_text(stmt_, index);
  return text == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(text));
}
bool Statement::column_is_null(int index) const {
  return sqlite3_column_type(stmt_, index) == SQLITE_NULL;
}
bool Statement::column_is_number(int index) const {
  const int type = sqlite3_column_type(stmt_, index);
  return type == SQLITE_INTEGER || type == SQLITE_FLOAT;
}

Transaction::Transaction(Connection& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }

Transaction::~Transaction() {
  if (!done_) {
    try {
      db_.exec("ROLLBACK");
    } catch (const Error& e) {
      // A failed rollback leaves SQLite to roll back on close; never throw from a destructor.
      log().warn("{}", e.what());
    }
  }
}

void Transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace ka::db
