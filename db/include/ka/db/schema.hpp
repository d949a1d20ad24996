// The ka database schema and its migrations (PRAGMA user_version).
#pragma once

#include <ka/db/sqlite.hpp>

namespace ka::db {

/// The schema version this build writes.
constexpr int kSchemaVersion = 3;

/// Brings the database to kSchemaVersion, one transaction per step (an empty file becomes a
/// full schema). Throws ka::DbError when the file's version is newer than this build knows.
void migrate(Connection& db);

namespace detail {
/// Like migrate(), stopping at `target` (<= kSchemaVersion): lets tests build old databases.
void migrate_to(Connection& db, int target);
}  // namespace detail

}  // namespace ka::db
