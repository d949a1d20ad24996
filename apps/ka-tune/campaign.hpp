// ka-tune --slurm: a tuning campaign as a Slurm job array of shards and a merge job.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ka::apps {

/// What ka-tune --slurm was asked for, besides the tuning itself.
struct CampaignOptions {
  std::size_t shards = 0;  ///< --slurm N.
  std::string partition;
  std::string time;  ///< Per shard, as sbatch reads it ("2:00:00").
  std::string gres;  ///< Per shard ("gpu:1").
  int cpus_per_shard = 0;  ///< 0: each shard gets whole nodes (--exclusive).
  std::vector<std::string> sbatch_args;  ///< Passed to both jobs as #SBATCH lines.
  std::string dir;  ///< Shards, scripts, logs; "" → "<db>.campaign".
  bool no_submit = false;  ///< Write the scripts and print the sbatch commands only.
};

/// `argv` without ka-tune's own name and the options the campaign sets itself (--slurm and
/// its options, --db, --shard, --plan): what every shard runs, before its --shard and --db.
std::vector<std::string> shard_arguments(int argc, char** argv);

/// Writes the campaign's scripts into its folder and submits the shards that have not
/// finished as a job array, then the merge job after them (Note [Campaigns] in campaign.cpp).
/// `db` is the database the shards merge into. Returns ka-tune's exit status; throws
/// ka::ValueError for options that cannot make a campaign (2) and ka::IoError when a file
/// cannot be written or sbatch fails (1).
int run_campaign(const CampaignOptions& c, const std::string& db,
                 const std::vector<std::string>& shard_args);

}  // namespace ka::apps
