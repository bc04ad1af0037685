// Reading the launcher's environment (see launch_env.h): one family of variables per launcher, each
// parsed completely or refused, then checked against the others.
#include "comm/launch_env.h"

#include "core/check.h"
#include "core/untrusted_file.h"

#include <cstdlib>
#include <map>
#include <vector>

namespace zest {
namespace {

[[noreturn]] void refuse(const std::string& message) {
  throw Error("launcher environment: " + message);
}

std::optional<int> env_int(const EnvLookup& env, const std::string& name) {
  const auto value = env(name);
  if (!value) return std::nullopt;
  try {
    size_t used = 0;
    const int parsed = std::stoi(*value, &used);
    if (used == value->size()) return parsed;
  } catch (const std::exception&) {
  }
  refuse(name + "='" + printable(*value, 40) + "' is not an integer");
}

// A launcher's family of variables: which are set, and an error when some required ones are not.
struct Family {
  std::string name;                    // "torchrun-style", for messages
  std::vector<std::string> required;   // all of them, or none
  std::vector<std::string> optional;
  bool present(const EnvLookup& env) const {
    for (const auto* list : {&required, &optional})
      for (const auto& v : *list)
        if (env(v)) return true;
    return false;
  }
  void check_complete(const EnvLookup& env) const {
    std::string set, missing;
    for (const auto* list : {&required, &optional})
      for (const auto& v : *list)
        if (env(v)) set += (set.empty() ? "" : ", ") + v;
    for (const auto& v : required)
      if (!env(v)) missing += (missing.empty() ? "" : ", ") + v;
    if (!missing.empty())
      refuse(name + " variables are only partly set: " + set + " set, but " + missing +
             " missing (a launcher sets all of them; unset the stray ones, or start the ranks with a launcher)");
  }
};

const Family kMpi{"OpenMPI", {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"}};
const Family kTorch{"torchrun-style", {"RANK", "WORLD_SIZE"}, {"LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"}};
const Family kHorovod{"Horovod", {"HOROVOD_RANK", "HOROVOD_SIZE"}, {"HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"}};
const Family kSlurm{"Slurm", {"SLURM_PROCID", "SLURM_NTASKS"}, {"SLURM_LOCALID"}};

// The counts, checked as soon as a family is read: before any arithmetic on them (rank ÷ local size gives
// the node when no variable says it), at every world size.
void validate_counts(const WorldInfo& w) {
  if (w.size < 1) refuse(w.source + ": world size " + std::to_string(w.size) + " must be >= 1");
  if (w.rank < 0 || w.rank >= w.size)
    refuse(w.source + ": rank " + std::to_string(w.rank) + " is outside [0, " + std::to_string(w.size) + ")");
  if (w.local_size < 1)
    refuse(w.source + ": " + std::to_string(w.local_size) + " ranks on this node; it must be >= 1");
  if (w.local_rank < 0 || w.local_rank >= w.local_size)
    refuse(w.source + ": local rank " + std::to_string(w.local_rank) + " is outside [0, " +
           std::to_string(w.local_size) + ")");
  if (w.local_size > w.size)
    refuse(w.source + ": " + std::to_string(w.local_size) + " ranks on this node but a world of " +
           std::to_string(w.size));
}

// What is read after the counts: the node (given, or derived), and MASTER_PORT, which when set is a TCP
// port at every world size (a world of one never opens it, but a value of 99999 is a mistake the user
// should hear about before the run that needs it).
void validate_node_and_port(const WorldInfo& w, const EnvLookup& env) {
  if (w.node_rank < 0) refuse(w.source + ": node rank " + std::to_string(w.node_rank) + " must be >= 0");
  if (w.launcher == Launcher::mpi) return;
  const bool given = env("MASTER_PORT").has_value();
  if ((given || w.size > 1) && (w.master_port <= 0 || w.master_port > 65535))
    refuse(w.source + ": MASTER_PORT " + std::to_string(w.master_port) + " is not a TCP port (1-65535)");
}

// MASTER_ADDR/MASTER_PORT, or the defaults of a one-node world; several nodes need MASTER_ADDR.
void read_master(const EnvLookup& env, WorldInfo& w, const std::string& hint, bool needed) {
  const auto addr = env("MASTER_ADDR");
  if (addr) {
    w.master_addr = *addr;
  } else if (needed && w.local_size < w.size) {
    refuse(w.source + " describes " + std::to_string(w.size) + " ranks over several nodes (" +
           std::to_string(w.local_size) + " on this one) but MASTER_ADDR is not set: " + hint);
  } else {
    w.master_addr = "127.0.0.1";
  }
  w.master_port = env_int(env, "MASTER_PORT").value_or(29500);
}

WorldInfo read_mpi(const EnvLookup& env) {
  kMpi.check_complete(env);
  WorldInfo w;
  w.launcher = Launcher::mpi;
  w.source = "OpenMPI (OMPI_COMM_WORLD_*)";
  w.size = *env_int(env, "OMPI_COMM_WORLD_SIZE");
  w.rank = *env_int(env, "OMPI_COMM_WORLD_RANK");
  w.local_rank = env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK").value_or(0);
  w.local_size = env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE").value_or(1);
  validate_counts(w);
  w.node_rank = env_int(env, "OMPI_COMM_WORLD_NODE_RANK").value_or(0);
  return w;
}

WorldInfo read_torch(const EnvLookup& env, bool primary) {
  kTorch.check_complete(env);
  WorldInfo w;
  w.launcher = Launcher::torchrun;
  w.source = "torchrun-style (RANK/WORLD_SIZE)";
  w.size = *env_int(env, "WORLD_SIZE");
  w.rank = *env_int(env, "RANK");
  w.local_size = env_int(env, "LOCAL_WORLD_SIZE").value_or(w.size);
  // Unset: the rank's place on its node (a zero count is refused just below, not divided by).
  w.local_rank = env_int(env, "LOCAL_RANK").value_or(w.local_size > 0 ? w.rank % w.local_size : w.rank);
  validate_counts(w);
  w.node_rank = env_int(env, "GROUP_RANK").value_or(w.rank / w.local_size);
  read_master(env, w, "set it to the host of rank 0 (torchrun --master_addr, zest launch --master-addr)", primary);
  const auto agent = env("TORCHELASTIC_USE_AGENT_STORE");
  w.agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
  // A restarted worker group reuses the agent's store: each attempt has its own keys.
  if (w.agent_store) w.store_prefix = "zest/" + env("TORCHELASTIC_RESTART_COUNT").value_or("0") + "/";
  return w;
}

WorldInfo read_horovod(const EnvLookup& env, bool primary) {
  kHorovod.check_complete(env);
  WorldInfo w;
  w.launcher = Launcher::horovod;
  w.source = "Horovod (HOROVOD_RANK/HOROVOD_SIZE)";
  w.size = *env_int(env, "HOROVOD_SIZE");
  w.rank = *env_int(env, "HOROVOD_RANK");
  w.local_rank = env_int(env, "HOROVOD_LOCAL_RANK").value_or(0);
  w.local_size = env_int(env, "HOROVOD_LOCAL_SIZE").value_or(1);
  validate_counts(w);
  w.node_rank = env_int(env, "HOROVOD_CROSS_RANK").value_or(w.rank / w.local_size);
  read_master(env, w, "horovodrun's Gloo mode has no address zest can use: run MASTER_ADDR=<host of rank 0> "
                      "MASTER_PORT=<port> horovodrun --gloo ..., or horovodrun --mpi", primary);
  return w;
}

// "2(x3),1" → {2, 2, 2, 1}: Slurm's compressed tasks-per-node list.
std::vector<int> expand_tasks_per_node(const std::string& text) {
  std::vector<int> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(at, end - at);
    try {
      const int tasks = std::stoi(item);
      int repeat = 1;
      if (const auto x = item.find("(x"); x != std::string::npos) repeat = std::stoi(item.substr(x + 2));
      for (int i = 0; i < repeat && out.size() < 100000; ++i) out.push_back(tasks);
    } catch (const std::exception&) {
      return {};
    }
    at = end + 1;
  }
  return out;
}

WorldInfo read_slurm(const EnvLookup& env) {
  kSlurm.check_complete(env);
  WorldInfo w;
  w.launcher = Launcher::slurm;
  w.source = "Slurm (SLURM_PROCID/SLURM_NTASKS)";
  w.size = *env_int(env, "SLURM_NTASKS");
  w.rank = *env_int(env, "SLURM_PROCID");
  w.local_rank = env_int(env, "SLURM_LOCALID").value_or(0);
  w.node_rank = env_int(env, "SLURM_NODEID").value_or(0);
  const auto per_node = expand_tasks_per_node(
      env("SLURM_STEP_TASKS_PER_NODE").value_or(env("SLURM_TASKS_PER_NODE").value_or("")));
  w.local_size = w.node_rank >= 0 && w.node_rank < static_cast<int>(per_node.size())
                     ? per_node[static_cast<size_t>(w.node_rank)]
                     : std::max(1, w.local_rank + 1);
  validate_counts(w);
  if (const auto addr = env("MASTER_ADDR")) {
    w.master_addr = *addr;
  } else if (const auto nodes = env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST") : env("SLURM_JOB_NODELIST")) {
    w.master_addr = first_slurm_host(*nodes);
  } else if (w.local_size >= w.size) {
    w.master_addr = "127.0.0.1";
  } else {
    refuse(w.source + ": neither MASTER_ADDR nor SLURM_JOB_NODELIST is set, so the host of rank 0 is unknown");
  }
  // Every rank of the job derives the same port; jobs sharing a node get different ones.
  w.master_port = env_int(env, "MASTER_PORT").value_or(20000 + env_int(env, "SLURM_JOB_ID").value_or(9500) % 10000);
  return w;
}

void check_agree(const WorldInfo& primary, const WorldInfo& other) {
  if (primary.rank == other.rank && primary.size == other.size) return;
  refuse(primary.source + " says rank " + std::to_string(primary.rank) + " of " + std::to_string(primary.size) +
         " but " + other.source + " says rank " + std::to_string(other.rank) + " of " + std::to_string(other.size) +
         ": two launchers' variables disagree (unset the ones of the launcher not in use)");
}

}  // namespace

const char* launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::single: return "none";
    case Launcher::mpi: return "OpenMPI";
    case Launcher::torchrun: return "torchrun-style";
    case Launcher::horovod: return "Horovod";
    case Launcher::slurm: return "Slurm";
  }
  return "?";
}

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
  };
}

WorldInfo read_launch_environment(const EnvLookup& env) {
  std::vector<WorldInfo> found;  // in order of precedence
  if (kMpi.present(env)) found.push_back(read_mpi(env));
  if (kTorch.present(env)) found.push_back(read_torch(env, found.empty()));
  if (kHorovod.present(env)) found.push_back(read_horovod(env, found.empty()));
  // An allocation's Slurm variables under mpirun/torchrun describe nodes, not these ranks.
  if (found.empty() && kSlurm.present(env)) found.push_back(read_slurm(env));
  if (found.empty()) return WorldInfo{};
  for (size_t i = 1; i < found.size(); ++i) check_agree(found[0], found[i]);
  WorldInfo& w = found[0];
  validate_node_and_port(w, env);
  return w;
}

std::string first_slurm_host(const std::string& nodelist) {
  std::string host;
  int depth = 0;
  bool in_first_item = true;  // inside brackets, only up to the first ',' or '-'
  for (const char c : nodelist) {
    if (c == '[') {
      ++depth;
      in_first_item = true;
      continue;
    }
    if (c == ']') {
      --depth;
      continue;
    }
    if (depth == 0 && c == ',') break;
    if (depth > 0) {
      if (c == ',' || c == '-') in_first_item = false;
      if (in_first_item) host += c;
      continue;
    }
    host += c;
  }
  return host;
}

std::optional<int> take_local_rank_argument(std::vector<std::string>& args) {
  std::optional<int> found;
  for (size_t i = 0; i < args.size();) {
    const std::string& a = args[i];
    std::string value;
    size_t erase = 0;
    for (const std::string flag : {"--local_rank", "--local-rank"}) {
      if (a.rfind(flag + "=", 0) == 0) {
        value = a.substr(flag.size() + 1);
        erase = 1;
      } else if (a == flag && i + 1 < args.size()) {
        value = args[i + 1];
        erase = 2;
      }
    }
    if (erase == 0) {
      ++i;
      continue;
    }
    try {
      size_t used = 0;
      found = std::stoi(value, &used);
      if (used != value.size() || *found < 0) throw std::invalid_argument(value);
    } catch (const std::exception&) {
      throw Error("command line: " + a + (erase == 2 ? " " + value : "") +
                  ": the local rank must be a whole number >= 0");
    }
    args.erase(args.begin() + static_cast<std::ptrdiff_t>(i), args.begin() + static_cast<std::ptrdiff_t>(i + erase));
  }
  return found;
}

}  // namespace zest
