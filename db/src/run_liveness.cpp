#include <ka/core/error.hpp>
#include <ka/core/logging.hpp>
#include <ka/core/text.hpp>
#include <ka/db/run_liveness.hpp>

#include <sqlite3.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

// Note [Abandoned runs]
// A run killed with SIGKILL (or by a crash, or a power cut) never reaches finish_run(), so it
// stayed 'running' forever. begin_run() records the writer: its pid, the pid's start time
// (field 22 of /proc/<pid>/stat, clock ticks after boot) and '<hostname> <boot_id>'. Every
// tool that opens the database for writing (migrate()) then looks at the 'running' runs of
// its own host and boot: one whose pid is gone, or now names a process that started at
// another time (the pid was reused), or is a zombie, is marked 'abandoned'. A run of another
// host or another boot is left alone: its process cannot be looked at from here (after a
// reboot a pid proves nothing). Runs written before schema version 3 have no writer and are
// never marked. The hostname is part of the identity because containers on one kernel share
// its boot_id but not their pid namespaces.

namespace ka::db {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

std::optional<std::int64_t> process_start_ticks(std::int64_t pid) {
  if (pid <= 0) return std::nullopt;
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so fields are counted
  // from the last ')'. After it come field 3 (state) ... field 22 (starttime).
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close + 1));
  std::vector<std::string> after;
  for (std::string f; after.size() < 20 && fields >> f;) after.push_back(f);
  if (after.size() < 20) return std::nullopt;
  if (after[0] == "Z" || after[0] == "X" || after[0] == "x") return std::nullopt;  // exited
  return parse_int64(after[19]);
}

ProcessIdentity this_process() {
  ProcessIdentity me;
  me.pid = static_cast<std::int64_t>(::getpid());
  me.start_ticks = process_start_ticks(me.pid).value_or(0);
  char host[256] = {};
  const std::string boot_id = trimmed(read_text("/proc/sys/kernel/random/boot_id"));
  if (::gethostname(host, sizeof(host) - 1) == 0 && !boot_id.empty()) {
    me.host_boot = std::string(host) + " " + boot_id;
  }
  return me;
}

std::size_t mark_abandoned_runs(Connection& db) {
  if (db.user_version() < 3) return 0;
  const ProcessIdentity me = this_process();
  if (me.host_boot.empty()) return 0;
  // Read first, outside any transaction: most opens find nothing to mark and take no lock.
  std::vector<std::int64_t> gone;
  {
    auto st = db.prepare(
        "SELECT id, pid, pid_start FROM runs WHERE status = 'running' AND host_boot = ? AND "
        "pid IS NOT NULL AND pid_start IS NOT NULL");
    st.bind(1, me.host_boot);
    while (st.step()) {
      const auto start = process_start_ticks(st.column_int64(1));
      if (!start.has_value() || *start != st.column_int64(2)) gone.push_back(st.column_int64(0));
    }
  }
  if (gone.empty()) return 0;
  Transaction tx(db);
  auto mark = db.prepare(
      "UPDATE runs SET status = 'abandoned', finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') "
      "WHERE id = ? AND status = 'running'");
  std::size_t marked = 0;
  for (const std::int64_t id : gone) {
    mark.reset();
    mark.bind(1, id).run();
    marked += static_cast<std::size_t>(sqlite3_changes(db.handle()));
  }
  tx.commit();
  if (marked != 0) {
    log().info("{}: marked {} run(s) 'abandoned': their process on this machine is gone",
               db.path(), marked);
  }
  return marked;
}

}  // namespace ka::db
