#include "campaign.hpp"

#include <ka/core/error.hpp>
#include <ka/core/files.hpp>

#include <fmt/format.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

// Note [Campaigns]
// A campaign is one ka-tune command sharded over a Slurm job array, kept in a folder (default
// <db>.campaign, which must be on storage every node sees):
//   campaign.txt      the shard count, the merged database and the shards' command: running
//                     ka-tune --slurm again with another command is refused, not mixed in;
//   shard.sh          the array job: task I runs `ka-tune <command> --shard I/N --db
//                     shard-I.db` on the cores Slurm gave it, and writes shard-I.done when
//                     ka-tune exits 0;
//   merge.sh          the merge job, after the whole array (afterany, so that it also runs
//                     when a shard failed and can say which): it fails, naming every
//                     unfinished shard and its log, unless all are done; else `ka-db merge`
//                     puts every shard into the database in one transaction (all or
//                     nothing; a run merged before is not copied again), writes `merged`,
//                     and prints each device's recommendations;
//   logs/             shard-I.log, merge.log;  jobs: the ids last submitted.
// Submitting again submits only the shards without shard-I.done (a shard's own database
// resumes its trials: none is measured twice) and the merge job; nothing when all are done
// and merged. It is refused while the campaign's jobs are still queued or running.
// afterok would leave the merge job pending forever after a failed shard, with no word on
// which: afterany and the .done markers give the same guarantee and a reason.

namespace ka::apps {
namespace fs = std::filesystem;

namespace {

// Options only the campaign reads: with a value, and flags.
const std::set<std::string> kValued = {"--slurm",  "--partition",  "--time",
                                       "--gres",   "--cpus-per-shard", "--sbatch-arg",
                                       "--campaign", "--db",       "--shard"};
const std::set<std::string> kFlags = {"--no-submit", "--plan"};

// `text` quoted for bash: single quotes, each ' written as '\''.
std::string quote(const std::string& text) {
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string joined(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) out += (out.empty() ? "" : " ") + quote(a);
  return out;
}

// The folder this program lives in (/proc/self/exe): ka-tune and ka-db are installed together.
fs::path own_folder() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  KA_CHECK_TYPE(IoError, !ec, "cannot find ka-tune's own path (/proc/self/exe): ", ec.message());
  return exe.parent_path();
}

// "0-3", "1,3,5-7": the array indices of `shards`, ascending.
std::string array_spec(const std::vector<std::size_t>& shards) {
  std::string out;
  for (std::size_t i = 0; i < shards.size();) {
    std::size_t j = i;
    while (j + 1 < shards.size() && shards[j + 1] == shards[j] + 1) ++j;
    out += (out.empty() ? "" : ",") +
           (j == i ? std::to_string(shards[i]) : fmt::format("{}-{}", shards[i], shards[j]));
    i = j + 1;
  }
  return out;
}

// Runs `command` through the shell; its standard output and error together, and its status.
struct Ran {
  int status = -1;
  std::string output;
};
Ran run_shell(const std::string& command) {
  Ran r;
  std::FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  KA_CHECK_TYPE(IoError, p != nullptr, "cannot run '", command, "'");
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, p)) > 0) r.output.append(buffer, n);
  const int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A campaign's folder and what is in it.
struct Campaign {
  const CampaignOptions& options;
  fs::path dir;
  fs::path db;
  std::vector<std::string> args;
  fs::path ka_tune;
  fs::path ka_db;

  fs::path done_marker(std::size_t i) const { return dir / fmt::format("shard-{}.done", i); }

  // The identity of the campaign: a folder holds one.
  std::string identity() const {
    return fmt::format("ka-tune campaign\nshards {}\ndb {}\ncommand {}\n", options.shards,
                       db.string(), joined(args));
  }

  // A job script's first lines: what it is, its #SBATCH lines (`resources`: the job's own),
  // and `set -u`.
  std::string script_head(const std::string& purpose, const std::string& job,
                          const std::string& log, const std::string& resources) const {
    std::string s = fmt::format(
        "#!/bin/bash\n# {} Written by ka-tune --slurm;\n# running the same command again "
        "rewrites it.\n",
        purpose);
    s += fmt::format("#SBATCH --job-name={}-{}\n", job, db.stem().string());
    s += fmt::format("#SBATCH --output={}\n#SBATCH --ntasks=1\n", (dir / "logs" / log).string());
    s += resources;
    if (!options.partition.empty()) s += "#SBATCH --partition=" + options.partition + "\n";
    if (!options.time.empty()) s += "#SBATCH --time=" + options.time + "\n";
    for (const std::string& a : options.sbatch_args) s += "#SBATCH " + a + "\n";
    // The submission's folder, where the command's relative paths (--suites-dir) point.
    return s + "set -u\ncd " + quote(fs::current_path().string()) + " || exit 1\n";
  }

  std::string shard_script() const {
    const std::size_t n = options.shards;
    std::string resources =
        options.cpus_per_shard > 0
            ? fmt::format("#SBATCH --cpus-per-task={}\n", options.cpus_per_shard)
            : std::string("#SBATCH --exclusive\n");
    if (!options.gres.empty()) resources += "#SBATCH --gres=" + options.gres + "\n";
    std::string s = script_head("A ka-tune campaign's shards, one per array task.", "ka-tune",
                                "shard-%a.log", resources);
    s += "i=\"${SLURM_ARRAY_TASK_ID:?submit this script with sbatch --array}\"\n";
    s += fmt::format("dir={}\n", quote(dir.string()));
    s += "rm -f \"$dir/merged\" \"$dir/shard-$i.done\"\n";
    s += fmt::format(
        "echo \"ka-tune campaign: shard $i/{} on $(hostname), cores $(taskset -pc $$ | sed "
        "'s/.*: //')\"\n",
        n);
    s += fmt::format("{} {} --shard \"$i/{}\" --db \"$dir/shard-$i.db\"\n",
                     quote(ka_tune.string()), joined(args), n);
    s += "status=$?\n";
    s += "if [ \"$status\" -eq 0 ]; then date -u +%FT%TZ > \"$dir/shard-$i.done\"; fi\n";
    s += "exit \"$status\"\n";
    return s;
  }

  std::string merge_script() const {
    const std::size_t n = options.shards;
    std::string s = script_head(
        "A ka-tune campaign's merge job: every shard's database into one, or nothing.",
        "ka-merge", "merge.log", "#SBATCH --cpus-per-task=1\n");
    s += fmt::format("dir={}\ndb={}\n", quote(dir.string()), quote(db.string()));
    s += "unfinished=0\n";
    s += fmt::format("for i in $(seq 0 {}); do\n", n - 1);
    s += "  if [ ! -f \"$dir/shard-$i.done\" ]; then\n";
    s += fmt::format(
        "    echo \"ka-tune campaign: shard $i/{} did not finish; its log: "
        "$dir/logs/shard-$i.log\" >&2\n",
        n);
    s += "    unfinished=$((unfinished + 1))\n  fi\ndone\n";
    s += "if [ \"$unfinished\" -ne 0 ]; then\n";
    s += fmt::format(
        "  echo \"ka-tune campaign: $unfinished of {} shard(s) unfinished: nothing merged into "
        "$db. Fix the cause, then run the same ka-tune --slurm command again: it resubmits only "
        "the unfinished shards, and their trials resume.\" >&2\n",
        n);
    s += "  exit 1\nfi\n";
    std::string sources;
    for (std::size_t i = 0; i < n; ++i) sources += fmt::format(" \"$dir/shard-{}.db\"", i);
    s += fmt::format("{} merge --into \"$db\"{} || exit 1\n", quote(ka_db.string()), sources);
    s += "date -u +%FT%TZ > \"$dir/merged\"\n";
    s += fmt::format("{} show --db \"$db\" --recommendations\n", quote(ka_db.string()));
    return s;
  }

  std::vector<std::size_t> unfinished() const {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < options.shards; ++i) {
      if (!fs::exists(done_marker(i))) out.push_back(i);
    }
    return out;
  }
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Throws when `dir` holds another campaign, or when this one's jobs are still in the queue.
void check_folder(const Campaign& c) {
  const fs::path identity = c.dir / "campaign.txt";
  if (fs::exists(identity)) {
    const std::string before = read_text(identity);
    KA_CHECK(before == c.identity(), "campaign folder ", c.dir.string(),
             " holds another campaign:\n", before, "this command would be:\n", c.identity(),
             "give another --campaign, or remove the folder to start over");
  }
  const fs::path jobs = c.dir / "jobs";
  if (!fs::exists(jobs)) return;
  const std::string text = read_text(jobs);
  const std::string ids = text.substr(0, text.find('\n'));
  const Ran queued = run_shell("squeue -h -o %i -j " + quote(ids));
  // squeue refuses ids it has forgotten (finished long ago): then none is queued.
  KA_CHECK(queued.status != 0 || queued.output.find_first_not_of(" \n") == std::string::npos,
           "campaign ", c.dir.string(), " still has jobs in the queue (", ids,
           "): wait for them, or scancel them, before submitting it again");
}

void write_script(const fs::path& path, const std::string& text) {
  write_file_replacing(path.string(), text);
  fs::permissions(path, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                  fs::perm_options::add);
}

// sbatch's job id: the line of its --parsable output that is "123" or "123;cluster" (warnings
// may come on other lines).
std::string submit(const std::string& command) {
  const Ran r = run_shell(command);
  std::string id;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    const std::string first = line.substr(0, line.find(';'));
    if (!first.empty() && first.find_first_not_of("0123456789") == std::string::npos) id = first;
  }
  KA_CHECK_TYPE(IoError, r.status == 0 && !id.empty(), "sbatch failed (", command, "): ",
                r.output);
  return id;
}

}  // namespace

std::vector<std::string> shard_arguments(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string name = arg.substr(0, arg.find('='));
    if (kFlags.count(arg) != 0) continue;
    if (kValued.count(name) != 0) {
      if (name == arg) ++i;  // "--db x": skip the value too; "--db=x" is one word
      continue;
    }
    out.push_back(arg);
  }
  return out;
}

int run_campaign(const CampaignOptions& o, const std::string& db,
                 const std::vector<std::string>& shard_args) {
  KA_CHECK(o.shards >= 1, "--slurm ", o.shards, ": expected 1 shard or more");
  KA_CHECK(o.cpus_per_shard >= 0, "--cpus-per-shard ", o.cpus_per_shard,
           ": expected 0 (whole nodes) or more");
  for (const std::string* text : {&o.partition, &o.time, &o.gres}) {
    KA_CHECK(text->find_first_of("\n ") == std::string::npos, "'", *text,
             "': a Slurm option's value has no spaces or line breaks");
  }
  for (const std::string& a : o.sbatch_args) {
    KA_CHECK(a.rfind("--", 0) == 0 && a.find('\n') == std::string::npos, "--sbatch-arg '", a,
             "': expected one sbatch option such as --account=proj");
  }
  Campaign c{o, {}, fs::absolute(db).lexically_normal(), shard_args, {}, {}};
  c.dir = o.dir.empty() ? fs::path(c.db.string() + ".campaign")
                        : fs::absolute(o.dir).lexically_normal();
  KA_CHECK(c.dir.string().find_first_of(" \t\n") == std::string::npos, "campaign folder '",
           c.dir.string(), "': the logs' path goes into #SBATCH --output, which cannot hold "
           "spaces; give --campaign a folder without them");
  c.ka_tune = own_folder() / "ka-tune";
  c.ka_db = own_folder() / "ka-db";
  KA_CHECK_TYPE(IoError, ::access(c.ka_db.c_str(), X_OK) == 0,
                "the merge job needs ka-db next to ka-tune (", c.ka_db.string(),
                "); build or install it");
  KA_CHECK(o.no_submit || run_shell("command -v sbatch").status == 0,
           "sbatch is not on PATH: submit from a Slurm login node, or give --no-submit to only "
           "write the scripts");
  check_folder(c);
  fs::create_directories(c.dir / "logs");
  write_file_replacing((c.dir / "campaign.txt").string(), c.identity());
  write_script(c.dir / "shard.sh", c.shard_script());
  write_script(c.dir / "merge.sh", c.merge_script());

  const std::vector<std::size_t> todo = c.unfinished();
  if (todo.empty() && fs::exists(c.dir / "merged") && fs::exists(c.db)) {
    std::printf("ka-tune campaign %s: all %zu shards finished and merged into %s; nothing to "
                "submit (ka-db show --db %s)\n",
                c.dir.c_str(), o.shards, c.db.c_str(), c.db.c_str());
    return 0;
  }
  const std::string shards_cmd =
      todo.empty() ? std::string()
                   : fmt::format("sbatch --parsable --array={} {}", array_spec(todo),
                                 quote((c.dir / "shard.sh").string()));
  const std::string merge_cmd = "sbatch --parsable" +
                                std::string(todo.empty() ? "" : " --dependency=afterany:<array>") +
                                " " + quote((c.dir / "merge.sh").string());
  if (o.no_submit) {
    std::printf("ka-tune campaign %s: scripts written; submit with:\n", c.dir.c_str());
    if (!shards_cmd.empty()) std::printf("  %s\n", shards_cmd.c_str());
    std::printf("  %s\n", merge_cmd.c_str());
    return 0;
  }
  std::string ids;
  std::string array_id;
  if (!todo.empty()) {
    array_id = submit(shards_cmd);
    ids = array_id;
  }
  std::string merge = merge_cmd;
  if (!array_id.empty()) merge.replace(merge.find("<array>"), 7, array_id);
  const std::string merge_id = submit(merge);
  ids += (ids.empty() ? "" : ",") + merge_id;
  write_file_replacing((c.dir / "jobs").string(), ids + "\n");
  if (!todo.empty()) {
    std::printf("ka-tune campaign %s: shards %s of %zu submitted as job array %s (logs: "
                "%s/logs/shard-<i>.log)\n",
                c.dir.c_str(), array_spec(todo).c_str(), o.shards, array_id.c_str(),
                c.dir.c_str());
  }
  std::printf("merge job %s%s: merges them into %s (log: %s/logs/merge.log)\n", merge_id.c_str(),
              todo.empty() ? "" : " after the array", c.db.c_str(), c.dir.c_str());
  std::printf("watch: squeue -j %s; a shard's progress: tail -f %s/logs/shard-<i>.log\n",
              ids.c_str(), c.dir.c_str());
  return 0;
}

}  // namespace ka::apps
