#include <ka/core/error.hpp>
#include <ka/core/files.hpp>
#include <ka/core/logging.hpp>
#include <ka/db/recommendation_io.hpp>
#include <ka/db/schema.hpp>

#include "recommendation_rows.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

// Note [Export files]
// An exported table is an ordinary ka database at kSchemaVersion, made by migrate(), holding
// only the table's `recommendations` rows and their `devices` row; runs, results and trials
// stay empty (a few KiB of empty pages). Sharing the migrations means an export never drifts
// from the schema: RecommendationTable::load, import_sqlite() and any later migration read it
// as they read a full database. It is written to "<path>.tmp", switched to rollback-journal
// mode (a single self-contained file, no -wal/-shm beside it) and renamed over `path`, so a
// reader never sees half a table.

namespace ka::db {
namespace {

namespace fs = std::filesystem;

constexpr const char* kNow = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

std::optional<double> known(double value) {
  return std::isnan(value) ? std::nullopt : std::optional<double>(value);
}

void remove_database_files(const std::string& path) {
  std::error_code ignored;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    fs::remove(path + suffix, ignored);
  }
}

// A C++ string literal for arbitrary bytes: printable ASCII as is, the rest as 3-digit octal
// escapes (which, unlike \x, cannot swallow a following character); '?' escaped so no
// trigraph can form.
std::string cpp_literal(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\' || c == '?') {
      out += '\\';
      out += c;
    } else if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      char buf[5];
      std::snprintf(buf, sizeof(buf), "\\%03o", static_cast<unsigned>(u));
      out += buf;
    }
  }
  return out + '"';
}

std::string cpp_double(double value) {
  if (std::isnan(value)) return "std::numeric_limits<double>::quiet_NaN()";
  if (std::isinf(value)) {
    return value > 0 ? "std::numeric_limits<double>::infinity()"
                     : "-std::numeric_limits<double>::infinity()";
  }
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", value);
  std::string text = buf;
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

bool is_identifier(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (const char c : s) {
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string fields_json(const DeviceFingerprint& fingerprint) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [name, value] : fingerprint.fields()) j[name] = value;
  return j.dump();
}

void record_device(Connection& db, std::string_view fingerprint, std::string_view fields) {
  db.prepare(std::string("INSERT INTO devices (fingerprint, fields_json, first_seen, last_seen) "
                         "VALUES (?, ?, ") +
             kNow + ", " + kNow +
             ") ON CONFLICT (fingerprint) DO UPDATE SET fields_json = excluded.fields_json, "
             "last_seen = excluded.last_seen")
      .bind(1, fingerprint)
      .bind(2, fields)
      .run();
}

void put_recommendations(Connection& db, const std::vector<Recommendation>& rows) {
  auto device = db.prepare(
      std::string("INSERT INTO devices (fingerprint, fields_json, first_seen, last_seen) "
                  "VALUES (?, '{}', ") +
      kNow + ", " + kNow + ") ON CONFLICT (fingerprint) DO NOTHING");
  auto insert = db.prepare(
      std::string("INSERT INTO recommendations (fingerprint, op, shape_key, kernel, "
                  "kernel_version, config, fusion, median_ns, gain_over_default, source_run, "
                  "created_at, default_median_ns, gain_low, gain_high) VALUES (?, ?, ?, ?, ?, ?, "
                  "?, ?, ?, ?, coalesce(nullif(?, ''), ") +
      kNow +
      "), ?, ?, ?) ON CONFLICT (fingerprint, op, shape_key, kernel) DO UPDATE SET "
      "kernel_version = excluded.kernel_version, config = excluded.config, "
      "fusion = excluded.fusion, median_ns = excluded.median_ns, "
      "gain_over_default = excluded.gain_over_default, source_run = excluded.source_run, "
      "created_at = excluded.created_at, default_median_ns = excluded.default_median_ns, "
      "gain_low = excluded.gain_low, gain_high = excluded.gain_high");
  for (const Recommendation& r : rows) {
    device.reset();
    device.bind(1, r.fingerprint).run();
    insert.reset();
    insert.bind(1, r.fingerprint)
        .bind(2, r.op)
        .bind(3, r.shape_key)
        .bind(4, r.kernel)
        .bind(5, r.kernel_version)
        .bind(6, r.config.str())
        .bind(8, known(r.median_ns))
        .bind(9, known(r.gain_over_default))
        .bind(11, r.created_at)
        .bind(12, known(r.default_median_ns))
        .bind(13, known(r.gain_low))
        .bind(14, known(r.gain_high));
    if (r.fusion.has_value()) {
      insert.bind(7, *r.fusion);
    } else {
      insert.bind_null(7);
    }
    if (r.source_run.has_value()) {
      insert.bind(10, *r.source_run);
    } else {
      insert.bind_null(10);
    }
    insert.run();
  }
}

void export_sqlite(const RecommendationTable& table, const std::string& path) {
  // See Note [Export files].
  const std::string tmp = path + ".tmp";
  remove_database_files(tmp);
  {
    Connection db(tmp);
    migrate(db);
    Transaction tx(db);
    record_device(db, table.fingerprint(), table.device_json());
    put_recommendations(db, table.entries());
    tx.commit();
    db.exec("PRAGMA journal_mode = DELETE");
  }
  remove_database_files(path);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  KA_CHECK_TYPE(DbError, !ec, "cannot write table export '", path, "': ", ec.message());
}

void export_header(const RecommendationTable& table, const std::string& path,
                   std::string_view qualified_symbol) {
  std::vector<std::string_view> parts;
  for (std::string_view rest = qualified_symbol;;) {
    const auto sep = rest.find("::");
    parts.push_back(rest.substr(0, sep));
    if (sep == std::string_view::npos) break;
    rest = rest.substr(sep + 2);
  }
  for (const std::string_view part : parts) {
    KA_CHECK(is_identifier(part), "bad C++ symbol '", qualified_symbol,
             "' for a generated table header: expected ns::...::name of identifiers");
  }
  const std::string name(parts.back());
  parts.pop_back();
  std::string ns;
  for (const std::string_view part : parts) ns += (ns.empty() ? "" : "::") + std::string(part);

  std::ostringstream out;
  out << "// Generated by ka (ka::db::export_header): the recommendation table of one device.\n"
         "// Do not edit; export it again instead.\n"
         "// rows: "
      << table.size() << "\n#pragma once\n\n#include <ka/db/recommendation_table.hpp>\n\n"
      << "#include <cstddef>\n#include <cstdint>\n#include <limits>\n#include <string_view>\n\n";
  if (!ns.empty()) out << "namespace " << ns << " {\n\n";
  out << "/// DeviceFingerprint::key() of the device the rows were tuned on.\n"
      << "inline constexpr std::string_view " << name
      << "_fingerprint = " << cpp_literal(table.fingerprint()) << ";\n"
      << "/// That device's fields (JSON).\n"
      << "inline constexpr std::string_view " << name
      << "_device_json = " << cpp_literal(table.device_json()) << ";\n"
      << "inline constexpr std::size_t " << name << "_size = " << table.size() << ";\n";
  if (table.size() != 0) {
    out << "inline constexpr ka::db::CompiledRecommendation " << name << "_rows[] = {\n";
    for (const Recommendation& r : table.entries()) {
      out << "    {" << cpp_literal(r.fingerprint) << ", " << cpp_literal(r.op) << ", "
          << cpp_literal(r.shape_key) << ", " << cpp_literal(r.kernel) << ", " << r.kernel_version
          << ", " << cpp_literal(r.config.str()) << ", "
          << (r.fusion.has_value() ? cpp_literal(*r.fusion) : std::string("nullptr")) << ", "
          << cpp_double(r.median_ns) << ", " << cpp_double(r.gain_over_default) << ", "
          << "std::int64_t{" << (r.source_run.has_value() ? *r.source_run : -1) << "}, "
          << cpp_literal(r.created_at) << "},\n";
    }
    out << "};\n";
  } else {
    out << "inline constexpr const ka::db::CompiledRecommendation* " << name
        << "_rows = nullptr;\n";
  }
  out << "\n/// The compiled-in table for the running device `fingerprint`: rows of another "
         "device\n"
         "/// or of another kernel version than `current` are skipped and logged, as\n"
         "/// RecommendationTable::load does.\n"
      << "inline ka::db::RecommendationTable " << name
      << "(std::string_view fingerprint, const ka::db::KernelVersions& current) {\n"
      << "  return ka::db::RecommendationTable::from_compiled(" << name << "_rows, " << name
      << "_size, fingerprint, current, " << name << "_device_json);\n}\n";
  if (!ns.empty()) out << "\n}  // namespace " << ns << "\n";
  write_file_replacing(path, out.str());
}

void export_json(const RecommendationTable& table, const std::string& path) {
  using Json = nlohmann::ordered_json;
  auto number = [](double v) { return std::isnan(v) ? Json(nullptr) : Json(v); };
  Json doc = Json::object();
  doc["format"] = "ka.recommendations";
  doc["schema_version"] = kSchemaVersion;
  doc["fingerprint"] = table.fingerprint();
  Json device = Json::parse(table.device_json(), nullptr, /*allow_exceptions=*/false);
  doc["device"] = device.is_discarded() ? Json::object() : device;
  Json rows = Json::array();
  for (const Recommendation& r : table.entries()) {
    Json row = Json::object();
    row["op"] = r.op;
    row["shape_key"] = r.shape_key;
    row["kernel"] = r.kernel;
    row["kernel_version"] = r.kernel_version;
    row["config"] = r.config.str();
    row["fusion"] = r.fusion.has_value() ? Json(*r.fusion) : Json(nullptr);
    row["median_ns"] = number(r.median_ns);
    row["gain_over_default"] = number(r.gain_over_default);
    row["source_run"] = r.source_run.has_value() ? Json(*r.source_run) : Json(nullptr);
    row["created_at"] = r.created_at;
    rows.push_back(std::move(row));
  }
  doc["recommendations"] = std::move(rows);
  write_file_replacing(path, doc.dump(2) + "\n");
}

std::size_t import_sqlite(const std::string& path, Connection& target, std::string_view fingerprint,
                          const KernelVersions& current) {
  Connection source = open_for_reading(path);
  detail::check_table_schema(source);
  const std::vector<Recommendation> rows = detail::read_recommendations(source);
  const std::string device_json = detail::read_device_json(source, fingerprint);

  // Every distinct mismatch, with its row count, in one message.
  std::map<std::string, std::size_t> other_devices;
  std::map<std::tuple<std::string, int, int>, std::size_t> stale;
  std::map<std::string, std::size_t> unknown;
  for (const Recommendation& r : rows) {
    if (r.fingerprint != fingerprint) {
      ++other_devices[r.fingerprint];
      continue;
    }
    const auto it = current.find(r.kernel);
    if (it == current.end()) {
      ++unknown[r.kernel];
    } else if (it->second != r.kernel_version) {
      ++stale[{r.kernel, r.kernel_version, it->second}];
    }
  }
  std::string problems;
  auto add = [&problems](const std::string& text) {
    problems += (problems.empty() ? "" : "; ") + text;
  };
  for (const auto& [fp, n] : other_devices) {
    add(ka::detail::str_cat(n, " row(s) tuned on device '", fp, "', not on '", fingerprint, "'"));
  }
  for (const auto& [what, n] : stale) {
    add(ka::detail::str_cat(n, " row(s) for kernel '", std::get<0>(what), "' version ",
                            std::get<1>(what), ", but this build has version ", std::get<2>(what)));
  }
  for (const auto& [kernel, n] : unknown) {
    add(ka::detail::str_cat(n, " row(s) for kernel '", kernel,
                            "', which this build does not have"));
  }
  KA_CHECK_TYPE(DbError, problems.empty(), path,
                ": refusing to import the recommendation table: ", problems,
                ". Re-tune on this device and build, or export a matching table.");

  // Parse every shape key and config before writing anything.
  try {
    const RecommendationTable check(std::string(fingerprint), rows, current, device_json);
  } catch (const ValueError& e) {
    KA_THROW(DbError, path, ": refusing to import the recommendation table: ", e.what());
  }
  Transaction tx(target);
  // A file without the device row must not blank the fields the target already knows.
  if (device_json != "{}") record_device(target, fingerprint, device_json);
  put_recommendations(target, rows);
  tx.commit();
  log().info("{}: imported {} recommendation(s) into {}", path, rows.size(), target.path());
  return rows.size();
}

}  // namespace ka::db
