// Which process wrote a run, and whether it is still alive: lets a tool mark the runs a
// killed process left 'running' as 'abandoned'.
#pragma once

#include <ka/db/sqlite.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ka::db {

/// A process as `runs` records it (schema version 3).
struct ProcessIdentity {
  std::int64_t pid = 0;
  std::int64_t start_ticks = 0;  ///< /proc/<pid>/stat field 22: clock ticks after boot.
  std::string host_boot;         ///< '<hostname> <boot_id>'; empty when unknown.
};

/// This process. host_boot is empty when /proc/sys/kernel/random/boot_id cannot be read.
ProcessIdentity this_process();

/// The start time (clock ticks after boot) of the live process `pid`, or nullopt when no such
/// process exists or it has exited (a zombie). Reads /proc/<pid>/stat.
std::optional<std::int64_t> process_start_ticks(std::int64_t pid);

/// Marks as 'abandoned' (finished_at now) every 'running' run written on this host and boot
/// by a process that is gone: its pid no longer exists or now belongs to a process started at
/// another time. Runs of other hosts, other boots, or with no writer recorded are left alone.
/// Returns the number marked; 0 for a schema version below 3. Throws ka::DbError.
std::size_t mark_abandoned_runs(Connection& db);

}  // namespace ka::db
