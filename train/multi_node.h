// What `zest train` does for a world that may span several machines, around the training loop: the
// rendezvous settings from the run file, the check that every rank sees the same checkpoint folder
// (or, with [checkpoint] shared_fs = false, that each node has its own), and the resume decision,
// made once on rank 0 and followed by every rank.
#pragma once

#include "comm/communicator.h"
#include "train/run_config.h"

#include <string>
#include <vector>

namespace zest {

// Before the world communicator exists: engine.rendezvous_timeout_s, engine.collective_timeout_s,
// the configuration's fingerprint (every rank must run the same one) and stop signals for the waits.
void configure_rendezvous(const RunConfig& config);

// A stable hash of the resolved configuration (16 hex digits).
std::string config_fingerprint(const RunConfig& config);

// Collective. Rank 0 writes a token into checkpoint.dir and every rank reads it. Ranks that cannot
// are an error naming them and their hosts, unless checkpoint.shared_fs is false; then the first rank
// of each such host prepares that host's own folder. Returns whether this rank is such a first rank
// (it commits its host's step folders: checkpoint::SaveRequest::own_folder).
bool check_checkpoint_folder(const RunConfig& config, Communicator& comm);

// Collective. The step folder to resume from ("" for a fresh start): rank 0 picks the newest complete
// checkpoint and every rank takes its answer, after checking it can read what it needs there (the
// manifest, and with shared_fs = false its own file); a rank that cannot is an error naming it.
std::string agreed_resume_point(const RunConfig& config, bool resume, Communicator& comm);

// Every rank's host name, by rank (collective).
std::vector<std::string> rank_hosts(Communicator& comm);

}  // namespace zest
