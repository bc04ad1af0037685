// Offline and online merges into consolidated safetensors (see merge.h).
#include "checkpoint/merge.h"

#include "checkpoint/directory.h"
#include "checkpoint/manifest.h"
#include "checkpoint/merged_writer.h"
#include "checkpoint/output_path.h"
#include "checkpoint/rank_agreement.h"
#include "checkpoint/shard_reader.h"
#include "checkpoint/verify.h"
#include "comm/communicator.h"
#include "core/check.h"
#include "core/untrusted_file.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cmath>

namespace zest::checkpoint {
namespace {

// Every output tensor of a set of unit layouts: each parameter, then its aliases (same data).
struct Source {
  size_t unit = 0;
  const ParamSlot* slot = nullptr;
};

void list_outputs(const std::vector<UnitLayout>& units, std::vector<MergedTensor>& tensors,
                  std::vector<Source>& sources, nlohmann::json& aliases, const std::string& prefix) {
  for (size_t u = 0; u < units.size(); ++u) {
    for (const ParamSlot& slot : units[u].slots) {
      tensors.push_back({prefix + slot.name, slot.shape});
      sources.push_back({u, &slot});
      for (const std::string& alias : slot.aliases) {
        tensors.push_back({prefix + alias, slot.shape});
        sources.push_back({u, &slot});
        aliases[alias] = slot.name;
      }
    }
  }
}

void check_dtype(torch::Dtype dtype) {
  ZEST_CHECK(dtype == torch::kFloat32 || dtype == torch::kBFloat16 || dtype == torch::kFloat16,
             "merge: output dtype must be fp32, bf16 or fp16, got ", dtype);
}

MergeResult result_of(MergedWriter& writer, std::vector<std::string> files, size_t tensors) {
  return {std::move(files), writer.index_path(), writer.total_bytes(), static_cast<int64_t>(tensors), {}};
}

// Presence, size and header of every rank file before anything is written; one message lists them all.
void check_all_files(const std::string& dir, const Manifest& manifest) {
  std::string problems;
  int bad = 0;
  for (int r = 0; r < manifest.world_size; ++r) {
    const FileStatus status = check_rank_file(dir, manifest, r, /*hash=*/false);
    if (status.ok()) continue;
    ++bad;
    problems += "\n  - " + status.problem(manifest.files[static_cast<size_t>(r)]);
  }
  ZEST_CHECK(bad == 0, dir, ": ", bad, " of ", manifest.world_size, " rank file(s) cannot be merged:", problems);
}

// The header metadata of a merged file; zest.weights says which values it holds.
safetensors::Metadata merged_metadata(const std::string& model, int64_t step, const nlohmann::json& aliases,
                                      const MergeOptions& options) {
  safetensors::Metadata metadata{{"format", "pt"},
                                 {"zest.model", model},
                                 {"zest.step", std::to_string(step)},
                                 {"zest.weights", options.ema ? "ema" : "master"},
                                 {"zest.aliases", aliases.dump()}};
  for (const auto& [key, value] : options.extra_metadata) metadata[key] = value;
  return metadata;
}

}  // namespace

std::string merged_kind(const Manifest& manifest, const MergeOptions& options, const std::string& step_dir) {
  if (!options.ema) return kMasterShard;
  ZEST_CHECK(manifest.has_ema(), step_dir, ": this checkpoint has no EMA of the weights (its run had no [ema] "
             "table); merge without --ema for the trained weights");
  return kEmaShard;
}

MergeResult merge_offline(const std::string& ckpt, const std::string& out_path, const MergeOptions& options) {
  check_dtype(options.dtype);
  ZEST_CHECK(options.chunk_numel > 0, "merge: chunk_numel must be > 0");
  const CheckpointLocation where = locate_checkpoint(ckpt);
  const std::string& dir = where.step_dir;
  check_output_outside(out_path, where.root.empty() ? dir : where.root);
  const Manifest manifest = read_manifest(dir);
  const std::string kind = merged_kind(manifest, options, dir);
  check_all_files(dir, manifest);
  std::vector<MergedTensor> tensors;
  std::vector<Source> sources;
  nlohmann::json aliases = nlohmann::json::object();
  list_outputs(manifest.units, tensors, sources, aliases, options.name_prefix);
  MergedWriter writer(out_path, tensors, options.dtype, options.shard_size_bytes,
                      merged_metadata(manifest.model_name, manifest.step, aliases, options));
  ShardReader reader(dir, manifest, /*verify_checksums=*/true);
  // One fixed buffer for the whole merge: memory stays at chunk_numel fp32 (+ its converted copy).
  auto buffer = torch::empty({options.chunk_numel}, torch::kFloat32);
  for (const Source& s : sources) {
    for (int64_t done = 0; done < s.slot->numel; done += options.chunk_numel) {
      const int64_t n = std::min(options.chunk_numel, s.slot->numel - done);
      reader.read(kind, s.unit, s.slot->offset + done, n, buffer.data_ptr<float>());
      writer.append(buffer.narrow(0, 0, n));
    }
  }
  reader.finish_verification();  // a corrupt file fails the merge before any output gets its final name
  MergeResult result = result_of(writer, writer.finish(), tensors.size());
  if (!where.note.empty()) result.notes.push_back(where.note);
  return result;
}

MergeResult merge_online(StatefulEngine& engine, const std::string& out_path, const MergeOptions& options) {
  check_dtype(options.dtype);
  const EngineState state = engine.state();
  // The same on every rank (all run the same configuration), so no rank is left in a gather.
  ZEST_CHECK(!options.ema || state.find_shard(kEmaShard), "merge: the EMA of the weights was asked for, but this "
             "run keeps none (no [ema] table)");
  const torch::Tensor values = state.shard(options.ema ? kEmaShard : kMasterShard);
  Communicator& comm = engine.comm();
  const bool writes = comm.rank() == 0;
  std::vector<UnitLayout> layouts;
  for (const UnitShardLayout& unit : state.units) layouts.push_back(unit.layout);
  std::vector<MergedTensor> tensors;
  std::vector<Source> sources;
  nlohmann::json aliases = nlohmann::json::object();
  list_outputs(layouts, tensors, sources, aliases, options.name_prefix);

  // Rank 0's write errors are held until the gathers are over, so no rank is left waiting in one.
  std::unique_ptr<MergedWriter> writer;
  std::string error;
  auto attempt = [&](const std::function<void()>& fn) {
    if (writes && error.empty()) error = capture_error(fn);
  };
  attempt([&] {
    writer = std::make_unique<MergedWriter>(
        out_path, tensors, options.dtype, options.shard_size_bytes,
        merged_metadata(options.model_name, state.counters.step, aliases, options));
  });
  torch::NoGradGuard no_grad;
  size_t next = 0;  // first output tensor of the current unit
  for (size_t u = 0; u < state.units.size(); ++u) {
    const UnitShardLayout& unit = state.units[u];
    torch::Tensor full = values.narrow(0, unit.in_flat.begin, unit.in_flat.numel);  // stage 0: whole unit
    if (unit.owned.numel < unit.layout.padded_numel) {  // one unit at a time: never the whole model twice
      const torch::Tensor gathered = torch::empty({unit.layout.padded_numel}, full.options());
      comm.allgather(full.contiguous(), gathered)->wait();
      full = gathered;
    }
    full = full.to(torch::kCPU);  // the writer reads host bytes (waits for a device gather here)
    for (; next < sources.size() && sources[next].unit == u; ++next) {
      const ParamSlot& slot = *sources[next].slot;
      attempt([&] { writer->append(full.narrow(0, slot.offset, slot.numel)); });
    }
  }
  MergeResult result;
  attempt([&] { result = result_of(*writer, writer->finish(), tensors.size()); });
  raise_if_any(comm, error);
  return result;
}

torch::Dtype parse_merge_dtype(const std::string& name) {
  if (name == "fp32") return torch::kFloat32;
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kFloat16;
  ZEST_FAIL("unknown dtype '", name, "' (expected fp32, bf16 or fp16)");
}

uint64_t parse_byte_size(const std::string& text) {
  size_t digits_end = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &digits_end);
  } catch (const std::exception&) {
    ZEST_FAIL("size '", printable(text, 40), "' does not start with a number (examples: 5GB, 500MB, 2GiB, 1048576)");
  }
  std::string unit = text.substr(digits_end);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::pair<const char*, double> units[] = {
      {"", 1.0},     {"B", 1.0},     {"KB", 1e3},          {"MB", 1e6},          {"GB", 1e9},
      {"TB", 1e12},  {"KIB", 1024.0}, {"MIB", 1048576.0}, {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
  for (const auto& [name, factor] : units) {
    if (unit == name) {
      ZEST_CHECK(std::isfinite(value) && value >= 0, "size '", printable(text, 40), "' must be >= 0");
      const double bytes = value * factor;
      ZEST_CHECK(bytes <= 1e18, "size '", printable(text, 40), "' is larger than any file can be");
      ZEST_CHECK(bytes == std::floor(bytes), "size '", printable(text, 40), "' is not a whole number of bytes (",
                 bytes, ")");
      return static_cast<uint64_t>(bytes);
    }
  }
  ZEST_FAIL("size '", printable(text, 40), "' has an unknown unit '", printable(text.substr(digits_end), 20),
            "' (use B, KB, MB, GB, TB or KiB, MiB, GiB, TiB)");
}

}  // namespace zest::checkpoint
