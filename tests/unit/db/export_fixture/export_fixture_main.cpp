// ka_export_fixture HEADER SQLITE: exports the fixture table (export_fixture.hpp) as a
// generated C++ header and as an SQLite table export, at build time.
#include <ka/db/recommendation_io.hpp>

#include "export_fixture.hpp"

#include <exception>
#include <iostream>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: ka_export_fixture HEADER SQLITE\n";
    return 2;
  }
  try {
    using namespace ka::db;
    const RecommendationTable table(fixture::kFingerprint, fixture::rows(),
                                    fixture::kernel_versions(), fixture::kDeviceJson);
    export_header(table, argv[1], "ka_fixture::tuned::fixture_table");
    export_sqlite(table, argv[2]);
  } catch (const std::exception& e) {
    std::cerr << "ka_export_fixture: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
