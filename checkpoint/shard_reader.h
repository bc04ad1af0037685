// ShardReader: element ranges of a checkpoint's units, read from whichever rank files hold them
// (rank r's file holds [r·S, (r+1)·S) of every unit). Files are opened on first use and only the needed
// byte ranges are read, so resharding and merging never load a whole shard.
#pragma once

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zest::checkpoint {

class ShardReader {
 public:
  ShardReader(std::string step_dir, const Manifest& manifest);

  // Elements [begin, begin + numel) of unit `unit_idx`'s flat buffer of `kind` into dst (fp32).
  void read(const std::string& kind, size_t unit_idx, int64_t begin, int64_t numel, float* dst);
  // Ranks whose file has been opened (tests check that a rank reads only what it needs).
  std::vector<int> opened_ranks() const;

 private:
  const safetensors::Reader& reader(int rank);

  std::string dir_;
  const Manifest& manifest_;
  std::map<int, std::unique_ptr<safetensors::Reader>> readers_;
};

}  // namespace zest::checkpoint
