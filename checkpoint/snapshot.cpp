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

RankSnapshot snapshot_engine(Engine& engine, bool copy, bool to_host) {
  RankSnapshot snap;
  snap.rank = engine.comm().rank();
  std::vector<torch::Tensor> flats = {engine.master_shard()};  // all share the master shard's layout
  snap.kinds = {kMasterKind};
  for (const auto& [name, tensor] : engine.optimizer().state_tensors()) {
    snap.kinds.push_back(name);
    flats.push_back(tensor);
  }
  if (const ShardedEma* ema = engine.ema()) {  // the same kinds, in the same order, as describe_engine()
    snap.kinds.emplace_back(kEmaKind);
    flats.push_back(ema->shard());
  }
  for (const auto& unit : engine.units()) snap.units.push_back(unit.name());
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& flat : flats) {
    ZEST_CHECK(flat.numel() == engine.master_shard().numel() && flat.scalar_type() == torch::kFloat32,
               "optimizer state or EMA differs from the master shard's layout (", flat.numel(), " vs ",
               engine.master_shard().numel(), " fp32 elements)");
    std::vector<torch::Tensor> per_unit;
    for (size_t u = 0; u < engine.units().size(); ++u) {
      const Unit& unit = engine.units()[u];
      const ElementSpan mine = unit.layout().shard_span(snap.rank);
      const ElementSpan owned = unit.shard_span();
      ZEST_CHECK(mine.begin >= owned.begin && mine.end() <= owned.end(), "unit ", unit.name(), ": rank ",
                 snap.rank, " does not hold its slice [", mine.begin, ", ", mine.end(), ")");
      auto slice = flat.narrow(0, engine.master_span(u).begin + (mine.begin - owned.begin), mine.numel);
      // Device tensors come to the host (the writer reads raw bytes) unless the caller stages them itself.
      const bool to_copy = copy || (!slice.is_cpu() && to_host);
      per_unit.push_back(to_copy ? slice.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true) : slice);
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
