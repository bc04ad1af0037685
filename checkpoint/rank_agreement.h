// Collective helpers that keep ranks in agreement during save/load: one error, raised on every rank
// (a rank that throws alone would leave the others waiting in the next collective), and gathering
// small per-rank values.
#pragma once

#include "comm/communicator.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace zest::checkpoint {

// Collective. Empty `local_error` on every rank: returns. Otherwise every rank throws zest::Error with
// the message of the lowest failing rank (prefixed with that rank).
void raise_if_any(Communicator& comm, const std::string& local_error);

// Runs `fn`, catching zest::Error / std::exception into a message (empty on success). Used before
// raise_if_any so that no rank leaves a collective sequence early.
std::string capture_error(const std::function<void()>& fn);

// Collective: every rank's string, in rank order.
std::vector<std::string> allgather_strings(Communicator& comm, const std::string& mine);
// Collective: every rank's values (all ranks pass the same count), rank-major.
std::vector<int64_t> allgather_int64(Communicator& comm, const std::vector<int64_t>& mine);

}  // namespace zest::checkpoint
