// The nodes of a multi-node `zest launch` (-H node1:4,node2:4 or an OpenMPI-style hostfile) and the free
// TCP port a launch picks for its rendezvous.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace zest {

// "node1:4,node2:4" (slots default 1), or a hostfile's lines "node1 slots=4" / "node1:4" ('#' comments).
// Errors name the item, or the file and line.
std::vector<std::pair<std::string, int>> parse_host_list(const std::string& list);
std::vector<std::pair<std::string, int>> read_hostfile(const std::string& path);

// A TCP port that is free on `addr` right now (the kernel's pick).
int find_free_port(const std::string& addr);

}  // namespace zest
