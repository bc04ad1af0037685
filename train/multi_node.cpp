// zest train's multi-machine steps (see multi_node.h): the rendezvous settings, the shared-folder
// token, and the resume decision broadcast from rank 0.
#include "train/multi_node.h"

#include "checkpoint/directory.h"
#include "checkpoint/manifest.h"
#include "comm/collective_timeout.h"
#include "comm/rendezvous.h"
#include "core/check.h"
#include "core/untrusted_file.h"
#include "train/run_folder.h"
#include "train/stop_signal.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>
#include <sstream>

namespace zest {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTokenName = ".zest-shared-check";

// The shared-folder check's token (a few bytes), or "" when it is absent or not a small regular file.
std::string read_file_text(const fs::path& path) {
  try {
    return read_text_file(path.string(), "shared-folder check token", 4096);
  } catch (const Error&) {
    return "";
  }
}

std::string rank_list(const std::vector<int>& ranks, const std::vector<std::string>& hosts) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8) return out + ", ...";
    out += str(i == 0 ? "" : ", ", "rank ", ranks[i], " (host ", hosts[static_cast<size_t>(ranks[i])], ")");
  }
  return out;
}

const char* kSharedFix =
    "put checkpoint.dir on a filesystem every node mounts at the same path (NFS, Lustre, ...), or set "
    "[checkpoint] shared_fs = false so that each node keeps its own ranks' files (README.md, \"Several machines\")";

}  // namespace

std::string config_fingerprint(const RunConfig& config) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a: the same on every machine and build
  for (const unsigned char c : to_toml(config)) h = (h ^ c) * 0x100000001b3ull;
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(h));
  return text;
}

void configure_rendezvous(const RunConfig& config) {
  set_collective_timeout(config.engine.collective_timeout_s);
  set_rendezvous_timeout(config.engine.rendezvous_timeout_s);
  set_rendezvous_fingerprint(config_fingerprint(config));
  set_interrupt_check([] { return stop_requested(); });
}

std::vector<std::string> rank_hosts(Communicator& comm) {
  constexpr int64_t kBytes = 64;
  auto all = torch::zeros({comm.size() * kBytes}, torch::kUInt8);
  const std::string own = host_name_of_this_machine().substr(0, kBytes - 1);
  auto mine = torch::zeros({kBytes}, torch::kUInt8);
  std::memcpy(mine.data_ptr(), own.data(), own.size());
  comm.allgather(mine, all)->wait();
  std::vector<std::string> hosts;
  for (int r = 0; r < comm.size(); ++r) hosts.emplace_back(static_cast<const char*>(all.data_ptr()) + r * kBytes);
  return hosts;
}

bool check_checkpoint_folder(const RunConfig& config, Communicator& comm) {
  if (comm.size() == 1) return false;
  const fs::path token = fs::path(config.checkpoint.dir) / kTokenName;
  std::string nonce;
  if (comm.rank() == 0) {
    std::random_device random;
    nonce = str(host_name_of_this_machine(), " ", ::getpid(), " ", random(), random());
    std::ofstream(token, std::ios::binary | std::ios::trunc) << nonce;  // rank 0 made the folder writable already
  }
  nonce = comm.broadcast_string(nonce, 0);
  auto sees = torch::zeros({comm.size()}, torch::kInt64);
  auto own = torch::tensor({read_file_text(token) == nonce ? int64_t{1} : int64_t{0}});
  comm.allgather(own, sees)->wait();  // also the barrier before the token goes
  if (comm.rank() == 0) {
    std::error_code ignored;
    fs::remove(token, ignored);
  }
  const std::vector<std::string> hosts = rank_hosts(comm);
  std::vector<bool> shares;
  std::vector<int> apart;
  for (int r = 0; r < comm.size(); ++r) {
    shares.push_back(sees[r].item<int64_t>() == 1);
    if (!shares.back()) apart.push_back(r);
  }
  if (apart.empty()) return false;
  if (config.checkpoint.shared_fs)
    throw Error(str("checkpoint.dir '", config.checkpoint.dir, "' is not the same folder on every rank: ",
                    rank_list(apart, hosts), " cannot read the token rank 0 (host ", hosts[0], ") wrote there; ",
                    kSharedFix));
  // shared_fs = false: the first rank of each host apart from rank 0's folder makes that host's folder.
  const bool leader = !shares[static_cast<size_t>(comm.rank())] &&
                      [&] {
                        for (int r : apart)
                          if (hosts[static_cast<size_t>(r)] == hosts[static_cast<size_t>(comm.rank())])
                            return r == comm.rank();
                        return false;
                      }();
  std::string error;
  if (leader) {
    try {
      ensure_writable_dir(config.checkpoint.dir, "checkpoint.dir");
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (comm.any(!error.empty())) throw Error(error.empty() ? "checkpoint.dir could not be prepared on another node" : error);
  return leader;
}

std::string agreed_resume_point(const RunConfig& config, bool resume, Communicator& comm) {
  if (!resume) return "";
  std::string chosen;
  int saved_world = 0;
  if (comm.rank() == 0) {
    chosen = checkpoint::find_latest(config.checkpoint.dir).value_or("");
    if (!chosen.empty()) {
      try {  // through the manifest's own reader: bounded, checksummed
        saved_world = checkpoint::read_manifest(chosen).world_size;
      } catch (const Error&) {
        saved_world = 0;  // the loader names what is wrong with the manifest
      }
    }
  }
  chosen = comm.broadcast_string(chosen, 0);
  if (chosen.empty() || comm.size() == 1) return chosen;
  // What this rank reads: the manifest (shared folder), or its own file (a node's own folder).
  const fs::path need = config.checkpoint.shared_fs ? fs::path(chosen) / checkpoint::kManifestName
                                                    : fs::path(chosen) / checkpoint::rank_file_name(comm.rank());
  std::error_code ec;
  auto missing = torch::zeros({comm.size()}, torch::kInt64);
  auto own = torch::tensor({fs::exists(need, ec) ? int64_t{0} : int64_t{1}});
  comm.allgather(own, missing)->wait();
  auto world = torch::tensor({int64_t{saved_world}});
  comm.broadcast_sync(world, 0);
  std::vector<int> blind;
  for (int r = 0; r < comm.size(); ++r)
    if (missing[r].item<int64_t>() != 0) blind.push_back(r);
  if (!config.checkpoint.shared_fs && world.item<int64_t>() > 0 && world.item<int64_t>() != comm.size())
    throw Error(str("resuming ", chosen, " (saved by ", world.item<int64_t>(), " ranks) on ", comm.size(),
                    " ranks reads every rank's file, but with [checkpoint] shared_fs = false each node holds only its "
                    "own: first gather the nodes' step folders into one (e.g. rsync -a node2:", chosen, "/ ", chosen,
                    "/ on the node of rank 0, and the same on every node), or resume with ",
                    world.item<int64_t>(), " ranks"));
  if (blind.empty()) return chosen;
  const std::vector<std::string> hosts = rank_hosts(comm);
  throw Error(str("rank 0 (host ", hosts[0], ") resumes from ", chosen, ", but ", rank_list(blind, hosts),
                  " cannot see ", config.checkpoint.shared_fs ? "its manifest" : "their own rank files", " there; ",
                  config.checkpoint.shared_fs ? kSharedFix
                                              : "copy the step folder each node wrote back to it, or start fresh "
                                                "with --no-resume and another checkpoint.dir"));
}

}  // namespace zest
