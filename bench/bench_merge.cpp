// Offline-merge benchmark: generates a synthetic 4-rank checkpoint of ~1.5 GB (AdamW state, a
// 32000×1024 embedding as the largest tensor) and merges it, reporting MB/s and peak RSS. Generation and
// merge run as separate invocations so the merge's peak RSS is its own:
//   bench_merge generate DIR          (writes DIR/step_00000001/ through the real save protocol pieces)
//   bench_merge merge DIR OUT [bf16]  (same work as `zest merge DIR -o OUT --dtype ...`)
#include "checkpoint/checkpoint.h"
#include "checkpoint/snapshot.h"
#include "engine/unit_layout.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

namespace {

using namespace zest;

constexpr int kWorld = 4;

std::vector<UnitLayout> synthetic_units() {
  std::vector<UnitLayout> units;
  units.push_back(make_unit_layout("embed", {{"embed.weight", {}, {32000, 1024}, 0, 32000 * 1024}}, kWorld));
  for (int b = 0; b < 14; ++b) {
    const std::string p = "blocks." + std::to_string(b) + ".";
    std::vector<ParamSlot> slots;
    for (const char* name : {"attn.q", "attn.k", "attn.v", "attn.o"}) {
      slots.push_back({p + name + ".weight", {}, {1280, 1280}, 0, 1280 * 1280});
      slots.push_back({p + name + ".bias", {}, {1280}, 0, 1280, false});
    }
    units.push_back(make_unit_layout("blocks." + std::to_string(b), slots, kWorld));
  }
  return units;
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

void generate(const std::string& dir) {
  checkpoint::Manifest m;
  m.model_name = "synthetic-1.5gb";
  m.config_hash = checkpoint::config_hash(m.model_name, "");
  m.step = 1;
  m.world_size = kWorld;
  m.stage = 2;
  m.precision = "bf16";
  m.units = synthetic_units();
  m.kinds = {"master", "exp_avg", "exp_avg_sq"};
  m.rank_extra_json.assign(kWorld, "{}");
  const std::string tmp = checkpoint::prepare_tmp_dir(dir, m.step);
  for (int r = 0; r < kWorld; ++r) {
    checkpoint::RankSnapshot snap;
    snap.rank = r;
    snap.kinds = m.kinds;
    auto gen = at::detail::createCPUGenerator(1234 + r);
    for (size_t k = 0; k < m.kinds.size(); ++k) {
      std::vector<torch::Tensor> per_unit;
      for (const auto& unit : m.units) per_unit.push_back(at::randn({unit.shard_numel()}, gen));
      snap.slices.push_back(per_unit);
    }
    for (const auto& unit : m.units) snap.units.push_back(unit.name);
    const checkpoint::RankFileIdentity identity{r, kWorld, m.step};
    m.files.push_back(checkpoint::write_rank_file(snap, tmp + "/" + checkpoint::rank_file_name(r), identity));
    std::printf("rank %d: %.1f MB\n", r, m.files.back().bytes / 1e6);
  }
  checkpoint::write_manifest(tmp, m);
  std::printf("committed %s (%lld parameters)\n", checkpoint::commit_tmp_dir(dir, m.step).c_str(),
              static_cast<long long>(m.num_parameters()));
}

void merge(const std::string& dir, const std::string& out, const std::string& dtype) {
  checkpoint::MergeOptions options;
  options.dtype = checkpoint::parse_merge_dtype(dtype);
  const auto start = std::chrono::steady_clock::now();
  const auto result = checkpoint::merge_offline(dir, out, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t read_bytes = 0;
  for (const auto& f : checkpoint::read_manifest(checkpoint::resolve_checkpoint(dir)).files) read_bytes += f.bytes;
  std::printf("merged %lld tensors: wrote %.1f MB (%s) in %.2f s = %.0f MB/s written; peak RSS %.0f MiB "
              "(checkpoint %.1f MB, largest tensor %.1f MB fp32)\n",
              static_cast<long long>(result.tensors), result.total_bytes / 1e6, dtype.c_str(), seconds,
              result.total_bytes / 1e6 / seconds, peak_rss_mib(), read_bytes / 1e6, 32000.0 * 1024 * 4 / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "generate" && argc == 3) {
      generate(argv[2]);
    } else if (mode == "merge" && (argc == 4 || argc == 5)) {
      merge(argv[2], argv[3], argc == 5 ? argv[4] : "fp32");
    } else {
      std::fprintf(stderr, "usage: bench_merge generate DIR | bench_merge merge DIR OUT [fp32|bf16|fp16]\n");
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_merge: error: %s\n", e.what());
    return 1;
  }
  std::printf("command: %s %s %s %s\n", argv[0], argv[1], argc > 2 ? argv[2] : "", argc > 3 ? argv[3] : "");
  return 0;
}
