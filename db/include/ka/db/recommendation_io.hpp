// Writing, exporting and importing recommendation tables: SQLite, a generated C++ header, JSON.
#pragma once

#include <ka/db/recommendation_table.hpp>
#include <ka/db/sqlite.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ka::db {

/// DeviceFingerprint::fields() as a JSON object (the `devices.fields_json` column).
std::string fields_json(const DeviceFingerprint& fingerprint);

/// Adds the `devices` row for `fingerprint` or, when present, refreshes its fields and
/// last_seen. The caller holds a Transaction.
void record_device(Connection& db, std::string_view fingerprint, std::string_view fields_json);

/// Inserts `rows`, replacing the row with the same (fingerprint, op, shape_key, kernel). Adds a
/// `devices` row ("{}" fields) for a fingerprint it has not met. The caller holds a
/// Transaction.
void put_recommendations(Connection& db, const std::vector<Recommendation>& rows);

/// Writes `table` (its rows and its device row) as a compact ka database at `path`, replacing
/// the file; RecommendationTable::load reads it back. See Note [Export files]. Throws
/// ka::DbError naming `path`.
void export_sqlite(const RecommendationTable& table, const std::string& path);

/// Writes a C++ header that compiles `table` into a binary: an array of
/// CompiledRecommendation and
///   ka::db::RecommendationTable SYMBOL(std::string_view fingerprint, const KernelVersions&)
/// inside `qualified_symbol`'s namespaces (e.g. "acme::tuned::cpu_table"), which builds the
/// table for the running device's fingerprint with the rules of RecommendationTable::load
/// (rows of another device or kernel version are skipped and logged). SYMBOL_fingerprint
/// names the device the rows were tuned on.
/// Throws ka::ValueError on a bad symbol, ka::IoError when `path` cannot be written.
void export_header(const RecommendationTable& table, const std::string& path,
                   std::string_view qualified_symbol);

/// Writes `table` as JSON: {"format": "ka.recommendations", "schema_version", "fingerprint",
/// "device": {...}, "recommendations": [{...}, ...]}. Throws ka::IoError.
void export_json(const RecommendationTable& table, const std::string& path);

/// Copies an exported table (export_sqlite()) into `target`, in one transaction, after
/// checking that every row was tuned on `fingerprint` for the kernel versions in `current`.
/// Refuses the whole file, with a ka::DbError naming it and every mismatch (device, kernel
/// version, unknown kernel, each with its row count), when any row does not match; then
/// nothing is written. Returns the number of rows imported.
std::size_t import_sqlite(const std::string& path, Connection& target, std::string_view fingerprint,
                          const KernelVersions& current);

}  // namespace ka::db
