// Rank snapshots of the engine's state and the rank file writer (see snapshot.h).
#include "checkpoint/snapshot.h"

#include "checkpoint/checksum.h"
#include "core/check.h"

#include <filesystem>

namespace zest::checkpoint {

int64_t RankSnapshot::nbytes() const {
  int64_t total = 0;
  for (const auto& kind : slices)
    for (const auto& t : kind) total += t.numel() * 4;
  return total;
}

RankSnapshot snapshot_engine(Engine& engine, bool copy) {
  RankSnapshot snap;
  snap.rank = engine.comm().rank();
  std::vector<torch::Tensor> flats = {engine.master_shard()};  // all share the master shard's layout
  snap.kinds = {"master"};
  for (const auto& [name, tensor] : engine.optimizer().state_tensors()) {
    snap.kinds.push_back(name);
    flats.push_back(tensor);
  }
  for (const auto& unit : engine.units()) snap.units.push_back(unit.name());
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& flat : flats) {
    ZEST_CHECK(flat.numel() == engine.master_shard().numel() && flat.scalar_type() == torch::kFloat32,
               "optimizer state differs from the master shard's layout (", flat.numel(), " vs ",
               engine.master_shard().numel(), " fp32 elements)");
    std::vector<torch::Tensor> per_unit;
    for (size_t u = 0; u < engine.units().size(); ++u) {
      const Unit& unit = engine.units()[u];
      const ElementSpan mine = unit.layout().shard_span(snap.rank);
      const ElementSpan owned = unit.shard_span();
      ZEST_CHECK(mine.begin >= owned.begin && mine.end() <= owned.end(), "unit ", unit.name(), ": rank ",
                 snap.rank, " does not hold its slice [", mine.begin, ", ", mine.end(), ")");
      auto slice = flat.narrow(0, engine.master_span(u).begin + (mine.begin - owned.begin), mine.numel);
      // Device tensors always come to the host: the writer reads raw bytes.
      per_unit.push_back(copy || !slice.is_cpu() ? slice.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true) : slice);
    }
    snap.slices.push_back(std::move(per_unit));
  }
  return snap;
}

FileRecord write_rank_file(const RankSnapshot& snapshot, const std::string& path,
                           const safetensors::Metadata& metadata) {
  std::vector<safetensors::TensorDecl> decls;
  for (size_t k = 0; k < snapshot.kinds.size(); ++k)
    for (size_t u = 0; u < snapshot.units.size(); ++u)
      decls.push_back({tensor_name(snapshot.kinds[k], snapshot.units[u]), torch::kFloat32,
                       {snapshot.slices[k][u].numel()}});
  {
    safetensors::Writer writer(path, decls, metadata);
    for (size_t k = 0; k < snapshot.kinds.size(); ++k)
      for (size_t u = 0; u < snapshot.units.size(); ++u) writer.append(snapshot.slices[k][u]);
    writer.finish();  // flush + fsync
  }
  // Hashing re-reads the file just written (from the page cache): what is hashed is what is on disk.
  return {std::filesystem::path(path).filename().string(), std::filesystem::file_size(path), xxh64_file(path)};
}

}  // namespace zest::checkpoint
