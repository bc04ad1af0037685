// `zest data synth|check|stats|prepare images`: write a synthetic dataset shaped for a model, validate a
// dataset folder (optionally against a model), (re)compute a motion dataset's normalisation statistics, and
// encode a folder of captioned images into a latent dataset (data/image_prepare.h).
#include "cli/commands.h"

#include "comm/world.h"
#include "core/interrupt.h"
#include "core/untrusted_file.h"
#include "data/image_prepare.h"
#include "data/motion_prepare.h"
#include "data/dataset.h"
#include "data/dataset_check.h"
#include "data/motion_dataset.h"
#include "data/motion_stats.h"
#include "data/synth.h"
#include "core/check.h"
#include "models/model_resolve.h"
#include "train/run_config.h"

#include <CLI/CLI.hpp>

#include <charconv>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace zest::cli {
namespace {

struct ModelChoice {
  std::string model;   // built-in flavor
  std::string config;  // or a run file
};

// The model's features, and the run file's data.dir when the model came from a run file.
ExpectedFeatures features_of(const ModelChoice& choice, std::string* data_dir) {
  ZEST_CHECK(choice.model.empty() != choice.config.empty(),
             "give either --model FLAVOR (e.g. hymotion_tiny) or --config RUN.toml");
  if (!choice.model.empty()) return builtin_model_features(choice.model);
  const RunConfig run = parse_run_config(choice.config);
  if (data_dir != nullptr) *data_dir = run.data.dir;
  return model_features(resolve_run_model(run));
}

std::map<std::string, int64_t> parse_widths(const std::vector<std::string>& assignments) {
  std::map<std::string, int64_t> widths;
  for (const std::string& a : assignments) {
    const size_t eq = a.find('=');
    ZEST_CHECK(eq != std::string::npos && eq > 0, "--feature '", a, "' must be NAME=INTEGER");
    try {
      widths[a.substr(0, eq)] = std::stoll(a.substr(eq + 1));
    } catch (const std::exception&) {
      ZEST_FAIL("--feature '", a, "': the value is not an integer");
    }
  }
  return widths;
}

// --samples as given: CLI11 would clamp 99999999999999999999999 to the largest int64 and start writing.
int64_t parse_sample_count(const std::string& text) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  ZEST_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(), "zest data synth: --samples '",
             text, "' is not an integer zest accepts (1 to 4294967296)");
  return value;
}

void add_synth(CLI::App& data) {
  struct Options {
    ModelChoice choice;
    std::string out;
    std::string samples = "256";
    std::vector<std::string> widths;
    SynthOptions synth;
  };
  auto o = std::make_shared<Options>();
  CLI::App* synth =
      data.add_subcommand("synth", "Write a synthetic dataset with learnable structure, shaped for a model");
  synth->add_option("--model", o->choice.model, "built-in model configuration (e.g. hymotion_tiny, unet_sdxl)");
  synth->add_option("--config", o->choice.config, "or a run file: its [model], and [data] dir as the default --out");
  synth->add_option("--out", o->out, "dataset folder to write");
  synth->add_option("--samples", o->samples, "number of samples")->capture_default_str();
  synth->add_option("--seed", o->synth.seed, "seed of the whole dataset")->capture_default_str();
  synth->add_option("--shard-size", o->synth.samples_per_shard, "samples per shard (default: ~128 MB shards)");
  synth->add_option("--feature", o->widths,
                    "an open width NAME=VALUE: text_tokens, min_frames, max_frames (motion), height, width (latents)")
      ->allow_extra_args(false);
  synth->add_flag("--overwrite", o->synth.overwrite, "replace a dataset already in --out");
  synth->callback([o] {
    std::string run_dir;
    const ExpectedFeatures model = features_of(o->choice, &run_dir);
    const std::string out = !o->out.empty() ? o->out : run_dir;
    ZEST_CHECK(!out.empty(), "zest data synth: --out DIR is required (with --model)");
    o->synth.widths = parse_widths(o->widths);
    o->synth.samples = parse_sample_count(o->samples);
    o->synth.source = str("zest data synth ", o->choice.model.empty() ? "--config " + o->choice.config
                                                                      : "--model " + o->choice.model,
                          " --samples ", o->synth.samples, " --seed ", o->synth.seed);
    const InterruptGuard stop_cleanly;  // SIGINT/SIGTERM: the partial dataset is removed, `out` is left as it was
    const DatasetManifest m = synthesize_dataset(out, model, o->synth);
    std::cout << "wrote " << m.total_samples() << " samples in " << m.shards.size() << " shard(s) of "
              << format_name(m.format) << " to " << out << " (" << model.model << ")\n";
  });
}

void add_check(CLI::App& data) {
  struct Options {
    std::string dir;
    ModelChoice choice;
  };
  auto o = std::make_shared<Options>();
  CLI::App* check = data.add_subcommand("check", "Validate a dataset folder (every shard), optionally against a model");
  check->add_option("dir", o->dir, "dataset folder")->required();
  check->add_option("--model", o->choice.model, "built-in model configuration whose widths the data must have");
  check->add_option("--config", o->choice.config, "or a run file naming the model");
  check->callback([o] {
    std::optional<ExpectedFeatures> expected;
    if (!o->choice.model.empty() || !o->choice.config.empty()) expected = features_of(o->choice, nullptr);
    // Values first: a NaN shard would otherwise surface as non-finite statistics, far from its cause.
    const std::vector<NonFiniteTensor> non_finite = find_non_finite(o->dir, read_manifest(o->dir));
    if (!non_finite.empty()) throw Error(describe_non_finite(o->dir, non_finite));
    const auto dataset = open_dataset(o->dir, {}, expected ? &*expected : nullptr);
    const DatasetManifest& m = dataset->manifest();
    std::cout << o->dir << ": " << format_name(m.format) << ", " << dataset->size() << " samples in "
              << m.shards.size() << " shard(s); features";
    for (const auto& [name, value] : m.features) std::cout << " " << name << "=" << value;
    if (const auto* motion = dynamic_cast<const MotionDataset*>(dataset.get()))
      std::cout << "; longest clip " << motion->max_clip_frames() << " frames";
    std::cout << (expected ? "; matches " + expected->model : std::string()) << "\n";
  });
}

void add_stats(CLI::App& data) {
  auto dir = std::make_shared<std::string>();
  CLI::App* stats = data.add_subcommand("stats", "Compute a motion dataset's per-feature mean/std (stats.safetensors)");
  stats->add_option("dir", *dir, "motion dataset folder")->required();
  stats->callback([dir] {
    DatasetManifest m = read_manifest(*dir);
    if (m.stats_file.empty()) m.stats_file = "stats.safetensors";
    const MotionStats s = compute_motion_stats(*dir, m);
    write_motion_stats(m.stats_path(*dir, /*must_exist=*/false), s);  // inside the folder, never through a link
    write_manifest(*dir, m);
    std::cout << "wrote " << m.stats_file << " from " << s.frames << " frames\n";
  });
}

void add_prepare_motions(CLI::App& prepare);  // below

// What a prepare run wrote and skipped (rank 0): the image and the motion reports share these fields.
template <typename Report>
void print_prepare_report(const Report& r, const std::string& out) {
  std::cout << "wrote " << r.samples << " samples in " << r.manifest.shards.size() << " shard(s) to " << out
            << " (captions from " << r.captions_from << ")";
  if (r.pieces_reused > 0) std::cout << "; " << r.pieces_reused << " of " << r.pieces_total << " pieces were done by an earlier run";
  std::cout << "\n";
  if (r.skipped.empty()) return;
  std::cout << "skipped " << r.skipped.size() << " file(s), listed in " << out << "/skipped.txt:\n";
  for (size_t i = 0; i < r.skipped.size() && i < 10; ++i)
    std::cout << "  " << printable(r.skipped[i].file) << ": " << printable(r.skipped[i].reason) << "\n";
  if (r.skipped.size() > 10) std::cout << "  ...\n";
}

void add_prepare(CLI::App& data) {
  auto o = std::make_shared<PrepareImagesOptions>();
  CLI::App* prepare = data.add_subcommand("prepare", "Encode raw training data into a dataset");
  prepare->require_subcommand(1);
  CLI::App* images = prepare->add_subcommand(
      "images", "A folder of captioned images → VAE latents + text-encoder states (zest.latents.v1), as diffusers' "
                "train_text_to_image scripts compute them");
  images->add_option("--pretrained", o->pretrained, "pipeline folder (vae/ text_encoder/ tokenizer/, SDXL also text_encoder_2/ tokenizer_2/)")
      ->required();
  images->add_option("--images", o->images, "folder of .jpg/.jpeg/.png with metadata.jsonl or name.txt captions")->required();
  images->add_option("--out", o->out, "dataset folder to create")->required();
  images->add_option("--resolution", o->resolution, "pixels of the square crop (with --buckets: about resolution² pixels)")
      ->capture_default_str();
  auto crop = std::make_shared<std::pair<bool, bool>>();  // --center-crop, --random-crop
  auto* center = images->add_flag("--center-crop", crop->first, "crop the middle (the default)");
  auto* random = images->add_flag("--random-crop", crop->second, "crop at a seeded random position (diffusers' default)");
  center->excludes(random);
  images->add_flag("--random-flip", o->random_flip, "flip half of the images horizontally (seeded)");
  images->add_option("--caption-column", o->caption_column, "metadata.jsonl column holding the caption")->capture_default_str();
  images->add_flag("--buckets", o->buckets, "aspect-ratio buckets: each image to the nearest aspect ratio at about resolution² pixels");
  images->add_option("--seed", o->seed, "seed of crops, flips and the VAE's latent samples")->capture_default_str();
  images->add_option("--batch-size", o->batch_size, "images encoded together")->capture_default_str();
  images->add_option("--piece-images", o->piece_images, "images per resumable piece of work (ranks take pieces in turn)")
      ->capture_default_str();
  images->add_option("--device", o->device, "cpu, cuda, cuda:N (default: this rank's GPU when there is one)");
  images->callback([o, crop] {
    o->center_crop = !crop->second;
    const WorldGuard world;  // under mpirun / zest launch each rank encodes its share of the images
    auto comm = world_communicator();
    const InterruptGuard stop_cleanly;  // SIGINT/SIGTERM: finished pieces kept for a rerun, OUT untouched
    const PrepareImagesReport r = prepare_images(*o, *comm, std::cout);
    if (comm->rank() == 0) print_prepare_report(r, o->out);
  });
  add_prepare_motions(*prepare);
}

void add_prepare_motions(CLI::App& prepare) {
  auto o = std::make_shared<PrepareMotionsOptions>();
  CLI::App* motions = prepare.add_subcommand(
      "motions", "A folder of captioned motion clips (.npy [frames, 201], 30 fps) → motion + HY-Motion's text features "
                 "(zest.motion.v1), encoded with Qwen3-8B and CLIP-L as the release's text pipeline does");
  motions->add_option("--pretrained", o->pretrained, "HY-Motion release folder (config.yml + latest.ckpt): the widths")
      ->required();
  motions->add_option("--text-encoders", o->text_encoders,
                      "folder holding Qwen3-8B/ and clip-vit-large-patch14/ (default: the release's ckpts/ layout)");
  motions->add_option("--motions", o->motions, "folder of .npy clips with metadata.jsonl or name.txt captions")->required();
  motions->add_option("--out", o->out, "dataset folder to create")->required();
  motions->add_option("--caption-column", o->caption_column, "metadata.jsonl column holding the caption")->capture_default_str();
  motions->add_option("--text-tokens", o->text_tokens, "Qwen3 tokens kept after the system prompt (the release's 128)")
      ->capture_default_str();
  motions->add_option("--max-frames", o->max_frames, "longer clips are skipped")->capture_default_str();
  motions->add_option("--batch-size", o->batch_size, "captions encoded together")->capture_default_str();
  motions->add_option("--piece-clips", o->piece_clips, "clips per resumable piece of work (ranks take pieces in turn)")
      ->capture_default_str();
  motions->add_option("--device", o->device, "cpu, cuda, cuda:N (default: this rank's GPU when there is one)");
  motions->callback([o] {
    const WorldGuard world;  // under mpirun / zest launch each rank encodes its share of the clips
    auto comm = world_communicator();
    const InterruptGuard stop_cleanly;  // SIGINT/SIGTERM: finished pieces kept for a rerun, OUT untouched
    const PrepareMotionsReport r = prepare_motions(*o, *comm, std::cout);
    if (comm->rank() == 0) print_prepare_report(r, o->out);
  });
}

}  // namespace

void add_data_command(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Dataset tools: synth, check, stats, prepare images|motions");
  data->require_subcommand(1);
  add_synth(*data);
  add_check(*data);
  add_stats(*data);
  add_prepare(*data);
}

}  // namespace zest::cli
