// Who started this process, read from the launcher's environment the same way for every launcher the
// guides use: OpenMPI (mpirun, horovodrun --mpi), torchrun / torch.distributed.launch / `zest launch`,
// Horovod's Gloo mode and Slurm's srun. Partial or contradictory variables are one clear error.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace zest {

enum class Launcher { single, mpi, torchrun, horovod, slurm };

struct WorldInfo {
  Launcher launcher = Launcher::single;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int node_rank = 0;        // GROUP_RANK / SLURM_NODEID / rank ÷ local_size
  std::string master_addr;  // where rank 0 (or the torchrun agent) hosts the rendezvous store; not MPI
  int master_port = 0;
  // torchrun's agent already hosts a store at master_addr:master_port (TORCHELASTIC_USE_AGENT_STORE):
  // rank 0 joins it as a client instead of hosting its own.
  bool agent_store = false;
  std::string store_prefix = "zest/";  // keys of this attempt (torchrun restarts reuse the agent's store)
  std::string source;                  // the variables it came from, for messages ("RANK/WORLD_SIZE")
};

const char* launcher_name(Launcher launcher);

// The value of an environment variable, or nullopt when unset or empty.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup process_environment();

// Reads, in this order of precedence: OMPI_COMM_WORLD_*; RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/
// GROUP_RANK with MASTER_ADDR/MASTER_PORT; HOROVOD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE; SLURM_PROCID/
// SLURM_NTASKS/SLURM_LOCALID (master: the first host of SLURM_STEP_NODELIST or SLURM_JOB_NODELIST,
// port 20000 + SLURM_JOB_ID mod 10000, unless MASTER_ADDR/MASTER_PORT are set). Slurm's variables
// under another launcher describe the allocation, not the ranks, and are ignored; two launchers'
// variables that disagree on the rank or the world size are an error, as is a family of variables
// with one missing. Nothing set: a world of one.
WorldInfo read_launch_environment(const EnvLookup& env);
inline WorldInfo discover_world() { return read_launch_environment(process_environment()); }

// The first host of a Slurm node list: "node[03-05,9],gpu1" → "node03".
std::string first_slurm_host(const std::string& nodelist);

// torch.distributed.launch (without --use_env) adds "--local_rank=N" (torch 2.x: "--local-rank=N")
// to the command line: removes it from `args` and returns N.
std::optional<int> take_local_rank_argument(std::vector<std::string>& args);

}  // namespace zest
