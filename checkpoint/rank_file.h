// A rank file's identity and its agreement with the manifest. Each rank file's safetensors header
// records which checkpoint position it was written for (format, version, rank, world size, step), and
// must hold exactly the tensors the manifest promises ("<kind>.<unit>", F32, [shard_numel]); a file
// copied from another step or rank, or a manifest that disagrees with the files, is refused here by
// load, merge and `zest ckpt inspect --verify` alike.
#pragma once

#include "checkpoint/manifest.h"
#include "formats/safetensors.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zest::checkpoint {

struct RankFileIdentity {
  int rank = 0;
  int world_size = 1;
  int64_t step = 0;
};

// The header metadata save writes into a rank file.
safetensors::Metadata rank_file_metadata(const RankFileIdentity& identity);

// What is wrong with an opened rank file at position `rank` of `manifest` (empty when nothing): its
// header identity, then missing, extra or differently shaped tensors. One sentence each, without the path.
std::vector<std::string> rank_file_problems(const safetensors::Reader& file, const Manifest& manifest, int rank);

// "<path>: does not match the checkpoint manifest: <problems>", or "" when there are none.
std::string rank_file_mismatch(const safetensors::Reader& file, const Manifest& manifest, int rank);
// Throws zest::Error with rank_file_mismatch(), if any.
void check_rank_file_header(const safetensors::Reader& file, const Manifest& manifest, int rank);

}  // namespace zest::checkpoint
