// Reading `recommendations` rows, shared by RecommendationTable::load and import_sqlite().
#pragma once

#include <ka/db/recommendation_table.hpp>
#include <ka/db/sqlite.hpp>

#include <string>
#include <vector>

namespace ka::db::detail {

/// Throws ka::DbError naming the file unless its schema version has a recommendation table
/// this build understands (2 ..= kSchemaVersion).
void check_table_schema(Connection& db);

/// Every row of `recommendations`, in id order. Throws ka::DbError naming the file and the
/// row on a malformed config.
std::vector<Recommendation> read_recommendations(Connection& db);

/// devices.fields_json for `fingerprint`, or "{}" when the file has no such row.
std::string read_device_json(Connection& db, std::string_view fingerprint);

}  // namespace ka::db::detail
