#include <ka/core/error.hpp>
#include <ka/core/logging.hpp>
#include <ka/db/sqlite.hpp>

#include <sqlite3.h>

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

Connection::Connection(const std::string& path, Mode mode) : path_(path) {
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
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, 10000);
  try {
    // Reading the schema fails here (not later, half-way through a run) when the file is not
    // a database.
    exec("PRAGMA foreign_keys = ON");
    if (mode != Mode::kReadOnly) {
      exec("PRAGMA journal_mode = WAL");
    }
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
    : db_(std::exchange(other.db_, nullptr)), path_(std::move(other.path_)) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    if (db_ != nullptr) sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
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
