// Reading the launchers' environments (comm/launch_env.h): torchrun (with its agent's store),
// OpenMPI, Slurm and Horovod read alike; partial or contradictory variables are one clear error.
#include "comm/launch_env.h"
#include "core/check.h"

#include <gtest/gtest.h>

#include <map>

namespace zest {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    read_launch_environment(env_of(vars));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchEnv, NothingSetIsAWorldOfOne) {
  const WorldInfo w = read_launch_environment(env_of({}));
  EXPECT_EQ(w.launcher, Launcher::single);
  EXPECT_EQ(w.size, 1);
}

TEST(LaunchEnv, TorchrunWithTheAgentStore) {
  const WorldInfo w = read_launch_environment(env_of({{"RANK", "5"},
                                                      {"WORLD_SIZE", "8"},
                                                      {"LOCAL_RANK", "1"},
                                                      {"LOCAL_WORLD_SIZE", "4"},
                                                      {"GROUP_RANK", "1"},
                                                      {"MASTER_ADDR", "node1"},
                                                      {"MASTER_PORT", "29400"},
                                                      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                                      {"TORCHELASTIC_RESTART_COUNT", "2"}}));
  EXPECT_EQ(w.launcher, Launcher::torchrun);
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.size, 8);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_size, 4);
  EXPECT_EQ(w.node_rank, 1);
  EXPECT_EQ(w.master_addr, "node1");
  EXPECT_EQ(w.master_port, 29400);
  EXPECT_TRUE(w.agent_store);
  EXPECT_EQ(w.store_prefix, "zest/2/");  // a restarted group does not see the previous attempt's keys
  const WorldInfo own = read_launch_environment(
      env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"}}));
  EXPECT_FALSE(own.agent_store);
  EXPECT_EQ(own.master_addr, "127.0.0.1");  // one node: the defaults
  EXPECT_EQ(own.master_port, 29500);
}

TEST(LaunchEnv, PartialVariablesAreAnErrorNotAWorldOfOne) {
  EXPECT_NE(error_of({{"RANK", "1"}}).find("WORLD_SIZE missing"), std::string::npos) << error_of({{"RANK", "1"}});
  EXPECT_NE(error_of({{"LOCAL_RANK", "0"}}).find("RANK, WORLD_SIZE missing"), std::string::npos);
  EXPECT_NE(error_of({{"HOROVOD_RANK", "1"}}).find("HOROVOD_SIZE missing"), std::string::npos);
  EXPECT_NE(error_of({{"OMPI_COMM_WORLD_RANK", "1"}}).find("OMPI_COMM_WORLD_SIZE missing"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x' is not an integer"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("rank 2 is outside [0, 2)"), std::string::npos);
  // Several nodes (2 ranks here of 4) and no address of rank 0's host.
  const std::string no_master = error_of({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_NE(no_master.find("MASTER_ADDR is not set"), std::string::npos) << no_master;
}

TEST(LaunchEnv, HorovodAloneIsAWorldNotOneProcess) {
  const WorldInfo w = read_launch_environment(env_of(
      {{"HOROVOD_RANK", "1"}, {"HOROVOD_SIZE", "2"}, {"HOROVOD_LOCAL_RANK", "1"}, {"HOROVOD_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(w.launcher, Launcher::horovod);
  EXPECT_EQ(w.rank, 1);
  EXPECT_EQ(w.size, 2);
  EXPECT_EQ(w.master_addr, "127.0.0.1");
  const std::string remote = error_of({{"HOROVOD_RANK", "1"}, {"HOROVOD_SIZE", "8"}, {"HOROVOD_LOCAL_SIZE", "4"}});
  EXPECT_NE(remote.find("horovodrun --mpi"), std::string::npos) << remote;
}

TEST(LaunchEnv, OpenMpiAndContradictions) {
  const WorldInfo w = read_launch_environment(env_of({{"OMPI_COMM_WORLD_RANK", "3"},
                                                      {"OMPI_COMM_WORLD_SIZE", "4"},
                                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                                      {"HOROVOD_RANK", "3"},  // horovodrun --mpi: the same
                                                      {"HOROVOD_SIZE", "4"},
                                                      {"SLURM_PROCID", "0"},  // the allocation's, ignored
                                                      {"SLURM_NTASKS", "2"}}));
  EXPECT_EQ(w.launcher, Launcher::mpi);
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.local_rank, 1);
  const std::string clash =
      error_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(clash.find("says rank 1 of 2 but torchrun-style (RANK/WORLD_SIZE) says rank 0 of 2"), std::string::npos)
      << clash;
}

// Without GROUP_RANK the node is rank ÷ ranks per node: rank 6 of 8, 4 per node, is on node 1.
TEST(LaunchEnv, NodeRankWithoutGroupRank) {
  const WorldInfo w = read_launch_environment(
      env_of({{"RANK", "6"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"MASTER_ADDR", "n0"}}));
  EXPECT_EQ(w.node_rank, 1);
  EXPECT_EQ(w.local_size, 4);
  const WorldInfo h = read_launch_environment(env_of(
      {{"HOROVOD_RANK", "5"}, {"HOROVOD_SIZE", "8"}, {"HOROVOD_LOCAL_SIZE", "2"}, {"HOROVOD_LOCAL_RANK", "1"}, {"MASTER_ADDR", "n0"}}));
  EXPECT_EQ(h.node_rank, 2);
}

// Two launchers' variables that agree on the rank but not on the world size describe two worlds.
TEST(LaunchEnv, LaunchersDisagreeingOnlyOnTheWorldSizeAreRefused) {
  const std::string clash =
      error_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "1"}, {"WORLD_SIZE", "4"},
                {"MASTER_ADDR", "n0"}});
  EXPECT_NE(clash.find("says rank 1 of 2 but torchrun-style (RANK/WORLD_SIZE) says rank 1 of 4"), std::string::npos)
      << clash;
}

// Counts are checked before any arithmetic (a zero ranks-per-node used to divide by zero), at every world
// size, and MASTER_PORT is a port even for a world of one.
TEST(LaunchEnv, ZeroCountsAndBadPortsAreRefusedByName) {
  EXPECT_NE(error_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "0"}}).find("0 ranks on this node"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("world size 0 must be >= 1"), std::string::npos);
  EXPECT_NE(error_of({{"HOROVOD_RANK", "0"}, {"HOROVOD_SIZE", "1"}, {"HOROVOD_LOCAL_SIZE", "0"}}).find("0 ranks on this node"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "99999"}}).find("MASTER_PORT 99999 is not a TCP port"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"GROUP_RANK", "-1"}}).find("node rank -1 must be >= 0"),
            std::string::npos);
  const std::string escaped = error_of({{"RANK", "[2J"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(escaped.find("RANK='\\x1b[2J' is not an integer"), std::string::npos) << escaped;
}

TEST(LaunchEnv, SlurmSrun) {
  const WorldInfo w = read_launch_environment(env_of({{"SLURM_PROCID", "5"},
                                                      {"SLURM_NTASKS", "8"},
                                                      {"SLURM_LOCALID", "1"},
                                                      {"SLURM_NODEID", "1"},
                                                      {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
                                                      {"SLURM_JOB_NODELIST", "gpu[07-08,11],login1"},
                                                      {"SLURM_JOB_ID", "123456"}}));
  EXPECT_EQ(w.launcher, Launcher::slurm);
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.size, 8);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_size, 4);
  EXPECT_EQ(w.master_addr, "gpu07");
  EXPECT_EQ(w.master_port, 20000 + 123456 % 10000);
  EXPECT_EQ(first_slurm_host("node1,node2"), "node1");
  EXPECT_EQ(first_slurm_host("n[3,5-6]"), "n3");
  EXPECT_EQ(first_slurm_host("a-b[009-010]"), "a-b009");
}

TEST(LaunchEnv, LocalRankArgumentOfTorchDistributedLaunch) {
  std::vector<std::string> args{"--local_rank=3", "train", "run.toml"};
  EXPECT_EQ(take_local_rank_argument(args), 3);
  EXPECT_EQ(args, (std::vector<std::string>{"train", "run.toml"}));
  std::vector<std::string> dashed{"train", "--local-rank", "1", "run.toml"};
  EXPECT_EQ(take_local_rank_argument(dashed), 1);
  EXPECT_EQ(dashed, (std::vector<std::string>{"train", "run.toml"}));
  std::vector<std::string> none{"train", "run.toml"};
  EXPECT_FALSE(take_local_rank_argument(none).has_value());
  std::vector<std::string> bad{"--local_rank=x"};
  EXPECT_THROW(take_local_rank_argument(bad), Error);
}

}  // namespace
}  // namespace zest
