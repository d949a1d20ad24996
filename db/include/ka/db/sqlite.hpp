// Small RAII types over SQLite's C API: Connection, Statement, Transaction.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace ka::db {

/// An open database, hardened against the file it opens (see Note [Hardened connections]):
/// defensive mode, no trusted schema, no extensions, triggers and views disabled, foreign keys
/// on, and a busy handler that waits with backoff (see Note [Waiting for the write lock]).
/// migrate() switches a database ka writes to WAL mode.
///
///   Connection db("ka.db");
///   Transaction tx(db);
///   db.prepare("INSERT INTO runs(host) VALUES (?)").bind(1, "box").step();
///   tx.commit();
class Connection {
 public:
  enum class Mode { kReadWriteCreate, kReadWrite, kReadOnly };

  /// Opens (and with kReadWriteCreate creates) the database at `path`. Throws ka::DbError
  /// naming the path and SQLite's reason when it cannot be opened or is not a database, and
  /// ka::ValueError when KA_DB_BUSY_TIMEOUT_MS is not a valid number of milliseconds.
  explicit Connection(const std::string& path, Mode mode = Mode::kReadWriteCreate);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;

  /// Runs one or more statements without results. Throws ka::DbError.
  void exec(std::string_view sql);
  /// Compiles one statement. Throws ka::DbError with the SQL text on a syntax error.
  class Statement prepare(std::string_view sql);
  [[nodiscard]] std::int64_t last_insert_rowid() const noexcept;
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] sqlite3* handle() const noexcept { return db_; }

  /// PRAGMA user_version: the schema version stored in the file.
  [[nodiscard]] int user_version();
  void set_user_version(int version);

  /// The busy handler's state (defined in sqlite.cpp).
  struct BusyWait;

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
  std::unique_ptr<BusyWait> busy_;  // owned here so a moved Connection keeps its handler state
};

/// How long a Connection waits for a lock another process holds before it fails:
/// KA_DB_BUSY_TIMEOUT_MS when set (a whole number from 0 to kMaxBusyTimeoutMs), else
/// kDefaultBusyTimeoutMs. Throws ka::ValueError naming the variable when it is malformed.
int busy_timeout_ms();
constexpr int kDefaultBusyTimeoutMs = 10 * 60 * 1000;
constexpr int kMaxBusyTimeoutMs = 24 * 60 * 60 * 1000;

/// A prepared statement. bind() indices start at 1 as in SQLite.
class Statement {
 public:
  Statement(Connection& db, sqlite3_stmt* stmt) : db_(&db), stmt_(stmt) {}
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) = delete;

  Statement& bind(int index, std::int64_t value);
  Statement& bind(int index, int value) { return bind(index, static_cast<std::int64_t>(value)); }
  Statement& bind(int index, double value);
  Statement& bind(int index, std::string_view value);
  Statement& bind(int index, const char* value) { return bind(index, std::string_view(value)); }
  Statement& bind(int index, const std::string& value) {
    return bind(index, std::string_view(value));
  }
  /// Binds NULL when `value` is empty.
  Statement& bind(int index, const std::optional<double>& value);
  Statement& bind_null(int index);

  /// Advances; true while a row is available. Throws ka::DbError on failure.
  bool step();
  /// Steps once, expecting no row (INSERT/UPDATE/DELETE).
  void run();
  /// Back to the start, keeping bindings.
  void reset();

  [[nodiscard]] std::int64_t column_int64(int index) const;
  [[nodiscard]] double column_double(int index) const;
  [[nodiscard]] std::string column_text(int index) const;
  [[nodiscard]] bool column_is_null(int index) const;
  /// True when the column's value is stored as an INTEGER or a REAL (not text, blob or NULL).
  [[nodiscard]] bool column_is_number(int index) const;

 private:
  Connection* db_;
  sqlite3_stmt* stmt_;
};

/// BEGIN IMMEDIATE on construction; ROLLBACK on destruction unless commit() was called, so an
/// exception between the two leaves no partial rows.
class Transaction {
 public:
  explicit Transaction(Connection& db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Connection& db_;
  bool done_ = false;
};

}  // namespace ka::db
