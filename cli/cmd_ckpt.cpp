// `zest ckpt inspect DIR [--verify]`: the manifest summary of a checkpoint (step, world size, stage,
// model, optimizer, EMA, size per rank) and, with --verify, every rank file's size, header and xxh64 checksum
// (the checks load and merge make; checkpoint/verify.h). DIR may be a root, DIR/latest or a step folder.
#include "cli/commands.h"

#include "checkpoint/checksum.h"
#include "checkpoint/verify.h"
#include "core/untrusted_file.h"
#include "train/error_report.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

namespace zest::cli {
namespace {

struct InspectArgs {
  std::string dir;
  bool verify = false;
};

void print_ema(const checkpoint::Manifest& m) {
  if (!m.ema) {
    std::printf("ema          none (the run had no [ema] table)\n");
    return;
  }
  const EmaConfig& e = *m.ema;
  std::printf("ema          decay %g (min %g), update_every %lld, start_step %lld", e.decay, e.min_decay,
              static_cast<long long>(e.update_every), static_cast<long long>(e.start_step));
  if (e.use_ema_warmup) std::printf(", warm-up inv_gamma %g power %g", e.inv_gamma, e.power);
  std::printf(" (`zest merge --ema` writes it)\n");
}

void print_summary(const std::string& step_dir, const checkpoint::Manifest& m) {
  int64_t aliases = 0;
  for (const auto& unit : m.units)
    for (const auto& slot : unit.slots) aliases += static_cast<int64_t>(slot.aliases.size());
  std::printf("checkpoint   %s\n", printable(step_dir, 400).c_str());
  std::printf("format       %s v%d%s, created %s\n", checkpoint::kFormatName, m.format_version,
              m.format_version < 2 ? " (no manifest checksum)" : "", printable(m.created_utc, 40).c_str());
  std::printf("model        %s (config hash %s)\n", m.model_name.empty() ? "(unnamed)" : printable(m.model_name, 80).c_str(),
              printable(m.config_hash, 40).c_str());
  std::printf("step         %lld (lr of the next step %.6g, %lld skipped so far)\n", static_cast<long long>(m.step),
              m.lr, static_cast<long long>(m.skipped_total));
  std::printf("world size   %d, stage %d, precision %s\n", m.world_size, m.stage, printable(m.precision, 20).c_str());
  std::printf("parameters   %lld in %zu units (%lld tied alias names)\n",
              static_cast<long long>(m.num_parameters()), m.units.size(), static_cast<long long>(aliases));
  std::printf("optimizer    %s (%lld updates), tensors per unit: ", to_string(m.optimizer.name),
              static_cast<long long>(m.optimizer_step));
  for (size_t k = 0; k < m.kinds.size(); ++k) std::printf("%s%s", k ? ", " : "", printable(m.kinds[k], 40).c_str());
  std::printf("\n");
  print_ema(m);
  std::printf("loss scale   %g%s\n", m.loss_scaler.scale, m.loss_scale_enabled ? " (dynamic, fp16)" : " (off)");
}

void run_inspect(const InspectArgs& args) {
  // Without --verify the listing shows what the manifest promises (files are not hashed or reported).
  const checkpoint::CheckpointReport report = checkpoint::inspect_checkpoint(args.dir, args.verify);
  const checkpoint::Manifest& m = report.manifest;
  if (!report.location.note.empty()) std::fprintf(stderr, "zest: note: %s\n", terminal_safe(report.location.note).c_str());
  print_summary(report.location.step_dir, m);
  std::printf("%-26s %14s  %-16s  %s\n", "file", "bytes", "xxh64", args.verify ? "status" : "");
  uint64_t total = 0;
  int bad = 0;
  for (size_t r = 0; r < m.files.size(); ++r) {
    const checkpoint::FileRecord& file = m.files[r];
    total += file.bytes;
    std::string status;
    if (args.verify) {
      const checkpoint::FileStatus& s = report.files[r];
      status = s.ok() ? "ok" : "BAD: " + s.problem(file);
      bad += s.ok() ? 0 : 1;
    }
    std::printf("%-26s %14llu  %-16s  %s\n", printable(file.name, 60).c_str(), static_cast<unsigned long long>(file.bytes),
                checkpoint::to_hex(file.xxh64).c_str(), terminal_safe(status).c_str());
  }
  std::printf("total        %.1f MB in %zu file(s)%s\n", total / 1e6, m.files.size(),
              args.verify ? (bad ? (", " + std::to_string(bad) + " BAD").c_str() : ", all verified") : "");
  if (bad > 0) exit_code() = 1;
}

}  // namespace

void add_ckpt_command(CLI::App& app) {
  CLI::App* ckpt = app.add_subcommand("ckpt", "Checkpoint tools");
  ckpt->require_subcommand(1);
  auto args = std::make_shared<InspectArgs>();
  CLI::App* inspect = ckpt->add_subcommand("inspect", "Summary of a checkpoint's manifest and files");
  inspect->add_option("dir", args->dir, "checkpoint: a root (its latest), DIR/latest, or a step_N/ folder")
      ->required();
  inspect->add_flag("--verify", args->verify,
                    "check every rank file's size, header and xxh64 checksum against the manifest (exit 1 if bad)");
  inspect->callback([args] { run_inspect(*args); });
}

}  // namespace zest::cli
