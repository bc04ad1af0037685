// Rank snapshots of the engine's state and the rank file writer (see snapshot.h).
#include "checkpoint/snapshot.h"

#include "checkpoint/checksum.h"
#include "checkpoint/save_phase.h"
#include "core/check.h"

#include <filesystem>

namespace zest::checkpoint {

int64_t RankSnapshot::nbytes() const {
  int64_t total = 0;
  for (const auto& kind : slices)
    for (const auto& t : kind) total += t.numel() * 4;
  return total;
}

RankSnapshot snapshot_state(const EngineState& state, bool copy, bool to_host) {
  RankSnapshot snap;
  snap.rank = state.rank;
  snap.kinds = state.shard_names();  // master, the optimizer's states, the EMA: describe_state()'s kinds
  for (const UnitShardLayout& unit : state.units) snap.units.push_back(unit.layout.name);
  const int64_t flat_numel = state.flat_numel();
  torch::NoGradGuard no_grad;
  for (const NamedShard& shard : state.shards) {
    const torch::Tensor& flat = shard.flat;
    ZEST_CHECK(flat.numel() == flat_numel && flat.scalar_type() == torch::kFloat32, "shard '", shard.name,
               "' differs from the master shard's layout (", flat.numel(), " vs ", flat_numel, " fp32 elements)");
    std::vector<torch::Tensor> per_unit;
    for (const UnitShardLayout& unit : state.units) {
      const ElementSpan slice = unit.layout.slice(snap.rank);
      ZEST_CHECK(slice.begin >= unit.owned.begin && slice.end() <= unit.owned.end(), "unit ", unit.layout.name,
                 ": rank ", snap.rank, " does not hold its slice [", slice.begin, ", ", slice.end(), ")");
      auto values = flat.narrow(0, unit.in_flat.begin + (slice.begin - unit.owned.begin), slice.numel);
      // Device tensors come to the host (the writer reads raw bytes) unless the caller stages them itself.
      const bool to_copy = copy || (!values.is_cpu() && to_host);
      per_unit.push_back(to_copy ? values.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true) : values);
    }
    snap.slices.push_back(std::move(per_unit));
  }
  return snap;
}

FileRecord write_rank_file(const RankSnapshot& snapshot, const std::string& path, const RankFileIdentity& identity) {
  ZEST_CHECK(identity.rank == snapshot.rank, path, ": rank ", snapshot.rank, "'s snapshot written as rank ",
             identity.rank);
  std::vector<safetensors::TensorDecl> decls;
  std::vector<torch::Tensor> pieces;  // in file order
  for (size_t k = 0; k < snapshot.kinds.size(); ++k) {
    for (size_t u = 0; u < snapshot.units.size(); ++u) {
      decls.push_back({tensor_name(snapshot.kinds[k], snapshot.units[u]), torch::kFloat32,
                       {snapshot.slices[k][u].numel()}});
      pieces.push_back(snapshot.slices[k][u]);
    }
  }
  {
    safetensors::Writer writer(path, decls, rank_file_metadata(identity));
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (i == pieces.size() / 2) reach_save_phase(SavePhase::rank_file_partial, identity.rank, identity.step);
      writer.append(pieces[i]);
    }
    writer.finish();  // flush + fsync
  }
  // Hashing re-reads the file just written (from the page cache): what is hashed is what is on disk.
  FileRecord record{std::filesystem::path(path).filename().string(), std::filesystem::file_size(path),
                    xxh64_file(path)};
  reach_save_phase(SavePhase::rank_file_written, identity.rank, identity.step);
  return record;
}

}  // namespace zest::checkpoint
