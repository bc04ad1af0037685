// `zest merge CKPT_DIR -o model.safetensors [--dtype fp32|bf16|fp16] [--shard-size 5GB] [--format F] [--ema]`:
// one consolidated model file (or hub-style shards + index) from a sharded checkpoint, streamed piece by
// piece with every rank file checksummed on the way (checkpoint/merge.h says what is refused); --format
// diffusers|hymotion writes the folder those libraries load (models/model_export.h), --format lora a LoRA
// run's adapters (models/lora_file.h); --ema writes the EMA of the weights instead of the trained weights.
#include "cli/commands.h"

#include "checkpoint/merge.h"
#include "core/check.h"
#include "core/interrupt.h"
#include "core/untrusted_file.h"
#include "train/error_report.h"
#include "models/model_export.h"

#include <CLI/CLI.hpp>

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

namespace zest::cli {
namespace {

struct MergeArgs {
  std::string checkpoint;
  std::string output;
  std::string dtype = "fp32";
  std::string shard_size = "0";
  std::string format = "safetensors";
  bool ema = false;
};

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

void run_merge(const MergeArgs& args) {
  checkpoint::MergeOptions options;
  options.dtype = checkpoint::parse_merge_dtype(args.dtype);
  options.shard_size_bytes = checkpoint::parse_byte_size(args.shard_size);
  // Below 64 KiB nearly every tensor would get a file of its own: surely a mistyped unit (0.5B, 5KB for 5GB).
  // Not higher: small shards still serve tiny models and the tests of sharded exports.
  constexpr uint64_t kMinShardBytes = uint64_t{64} << 10;
  ZEST_CHECK(options.shard_size_bytes == 0 || options.shard_size_bytes >= kMinShardBytes, "zest merge --shard-size ",
             printable(args.shard_size, 40), " is ", options.shard_size_bytes, " bytes: below 64 KiB nearly every tensor would "
             "get a file of its own; give a size such as 5GB or 2GiB, or 0 for one file");
  options.ema = args.ema;
  const auto start = std::chrono::steady_clock::now();
  // The first SIGINT/SIGTERM stops the merge at the next piece: its .tmp files are removed, nothing is
  // replaced, and the error says so (a second signal ends the process at once).
  const InterruptGuard stop_cleanly;
  const checkpoint::MergeResult result =
      export_checkpoint(args.checkpoint, args.output, options, parse_export_format(args.format));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Notes may quote the checkpoint's own strings (tensor names, `latest`): printed escaped.
  for (const std::string& note : result.notes) std::fprintf(stderr, "zest: note: %s\n", terminal_safe(note).c_str());
  for (const std::string& file : result.files) std::printf("wrote %s\n", printable(file, 400).c_str());
  if (!result.index_path.empty()) std::printf("wrote %s\n", printable(result.index_path, 400).c_str());
  std::printf("%lld tensors%s, %.1f MB (%s) in %.2f s: %.0f MB/s written; peak RSS %.0f MiB\n",
              static_cast<long long>(result.tensors), args.ema ? " (EMA weights)" : "", result.total_bytes / 1e6,
              args.dtype.c_str(), seconds, result.total_bytes / 1e6 / std::max(seconds, 1e-9), peak_rss_mib());
}

}  // namespace

void add_merge_command(CLI::App& app) {
  auto args = std::make_shared<MergeArgs>();
  CLI::App* cmd = app.add_subcommand("merge", "Merge a sharded checkpoint into one model safetensors file");
  cmd->add_option("checkpoint", args->checkpoint, "checkpoint: a root (its latest), DIR/latest, or a step_N/ folder")
      ->required();
  cmd->add_option("-o,--output", args->output,
                  "output file outside the checkpoint folder, e.g. model.safetensors (replaced if it exists)")
      ->required();
  cmd->add_option("--dtype", args->dtype, "output dtype: fp32 | bf16 | fp16")->capture_default_str();
  cmd->add_option("--shard-size", args->shard_size,
                  "split into files of at most this size with an index json (e.g. 5GB, 2GiB; 0 = one file)")
      ->capture_default_str();
  cmd->add_option("--format", args->format,
                  "safetensors (one file) | diffusers (-o is a UNet folder for from_pretrained) | hymotion (-o is a "
                  "folder with config.yml + latest.ckpt) | lora (a LoRA run's adapters as diffusers/peft load them: -o "
                  "is a folder for load_lora_weights, or a .safetensors file; the other formats fold them in)")
      ->capture_default_str();
  cmd->add_flag("--ema", args->ema,
                "write the EMA of the weights ([ema]) instead of the trained weights; refused when the checkpoint "
                "has none");
  cmd->callback([args] { run_merge(*args); });
}

}  // namespace zest::cli
