// The ka database schema, its migrations (PRAGMA user_version) and the checks a database file
// ka did not just create must pass before any row of it is read.
#pragma once

#include <ka/db/sqlite.hpp>

#include <string>

namespace ka::db {

/// The schema version this build writes.
constexpr int kSchemaVersion = 6;

/// Makes `db` ready for writing: checks it (check_database()) unless it is new and empty,
/// switches it to WAL mode, brings it to kSchemaVersion in one BEGIN IMMEDIATE transaction
/// (so any number of processes may do this at once), then marks the runs of this host whose
/// process is gone as 'abandoned' (mark_abandoned_runs()). Throws ka::DbError naming the file
/// and the problem, before anything is written, when the file is refused, including a
/// schema version newer than this build knows.
void migrate(Connection& db);

/// Refuses, with a ka::DbError naming the file and the problem, a database that is damaged
/// (PRAGMA quick_check), holds any trigger, view or virtual table, has a user_version outside
/// [0, kSchemaVersion], or lacks one of that version's tables or columns with ka's declared
/// types. See Note [Checked databases].
void check_database(Connection& db);

/// Opens `path` read-only and checks it (check_database()) before any row is read: the one way
/// ka opens a database it only reads (tables, import, merge and diff sources, ka-db show).
Connection open_for_reading(const std::string& path);

namespace detail {
/// Like migrate(), stopping at `target` (<= kSchemaVersion) and marking no runs: lets tests
/// build old databases.
void migrate_to(Connection& db, int target);
}  // namespace detail

}  // namespace ka::db
