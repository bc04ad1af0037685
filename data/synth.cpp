// Synthetic motion and latent datasets: a fixed random "world" (projections from a 4-value code to the
// text features and to the pattern parameters) drawn from the seed, then per sample a code, its text
// features and its target. Each sample has its own generator, so content does not depend on sharding.
#include "data/synth.h"

#include "formats/safetensors.h"
#include "data/motion_stats.h"
#include "data/seed.h"
#include "core/check.h"
#include "core/interrupt.h"
#include "core/untrusted_file.h"

#include <ATen/CPUGeneratorImpl.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace zest {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kCode = 4;  // latent "meaning" of a sample's text, shared by its features and target
constexpr double kPi = 3.14159265358979323846;

torch::Generator generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

torch::Tensor randn(std::vector<int64_t> shape, torch::Generator& gen) {
  return torch::randn(shape, gen, torch::kFloat32);
}

int64_t uniform_int(int64_t low, int64_t high, torch::Generator& gen) {  // in [low, high]
  return low + torch::randint(high - low + 1, {1}, gen, torch::kInt64).item<int64_t>();
}

// The world: how codes become text features and pattern parameters (same for every sample).
struct World {
  torch::Tensor to_tokens;  // [K, text_dim]
  torch::Tensor to_pooled;  // [K, pooled_dim]
  torch::Tensor to_amp;     // [K, channels]
  torch::Tensor to_phase;   // [K, channels]
  torch::Tensor offset;     // [channels] (motion: per-feature offset, exercises normalisation)
  torch::Tensor scale;      // [channels]
};

World make_world(uint64_t seed, int64_t text_dim, int64_t pooled_dim, int64_t channels) {
  auto gen = generator(mix_seed(seed, 0x77071d));
  World w;
  w.to_tokens = randn({kCode, text_dim}, gen) / std::sqrt(double(kCode));
  w.to_pooled = randn({kCode, std::max<int64_t>(pooled_dim, 1)}, gen) / std::sqrt(double(kCode));
  w.to_amp = randn({kCode, channels}, gen) / std::sqrt(double(kCode));
  w.to_phase = randn({kCode, channels}, gen) / std::sqrt(double(kCode));
  w.offset = 2.0 * randn({channels}, gen);
  w.scale = (0.5 * randn({channels}, gen)).exp();
  return w;
}

// Text features of a code: `valid` tokens near code·to_tokens (+ noise), the rest zero; pooled likewise.
struct Text {
  torch::Tensor tokens, mask, pooled;
};
Text make_text(const World& w, const torch::Tensor& code, int64_t tokens, int64_t valid, torch::Generator& gen) {
  const int64_t dim = w.to_tokens.size(1);
  Text t;
  t.tokens = torch::zeros({tokens, dim});
  const auto mean_token = torch::matmul(code, w.to_tokens).expand({valid, dim});
  t.tokens.narrow(0, 0, valid).copy_(mean_token + 0.3 * randn({valid, dim}, gen));
  t.mask = torch::arange(tokens) < valid;
  t.pooled = torch::matmul(code, w.to_pooled) + 0.1 * randn({w.to_pooled.size(1)}, gen);
  return t;
}

// Motion [frames, D]: per-feature sinusoid with a code-given period (8–32 frames), amplitude and phase.
torch::Tensor make_motion(const World& w, const torch::Tensor& code, int64_t frames, torch::Generator& gen) {
  const double period = 8.0 + 24.0 * torch::sigmoid(code[0]).item<double>();
  const auto amp = 1.0 + 0.5 * torch::tanh(torch::matmul(code, w.to_amp));
  const auto phase = kPi * torch::tanh(torch::matmul(code, w.to_phase));
  const auto t = torch::arange(frames, torch::kFloat32).unsqueeze(1);
  const auto wave = torch::sin(2.0 * kPi * t / period + phase.unsqueeze(0));
  const int64_t dim = w.offset.size(0);
  return w.offset + w.scale * (amp * wave + 0.02 * randn({frames, dim}, gen));
}

// Latents [C, H, W]: a plane wave whose spatial frequencies (1–3 cycles) and channel phases come from the code.
torch::Tensor make_latents(const World& w, const torch::Tensor& code, int64_t height, int64_t width,
                           torch::Generator& gen) {
  const double ky = 1.0 + 2.0 * torch::sigmoid(code[0]).item<double>();
  const double kx = 1.0 + 2.0 * torch::sigmoid(code[1]).item<double>();
  const auto amp = 0.5 + 0.5 * torch::sigmoid(torch::matmul(code, w.to_amp));
  const auto phase = kPi * torch::tanh(torch::matmul(code, w.to_phase));
  const auto y = torch::arange(height, torch::kFloat32).view({height, 1}) / double(height);
  const auto x = torch::arange(width, torch::kFloat32).view({1, width}) / double(width);
  const auto arg = (2.0 * kPi * (ky * y + kx * x)).unsqueeze(0) + phase.view({-1, 1, 1});
  const int64_t channels = amp.size(0);
  return amp.view({-1, 1, 1}) * torch::sin(arg) + 0.05 * randn({channels, height, width}, gen);
}

struct Widths {
  std::map<std::string, int64_t> all;  // the model's fixed widths + open widths (defaults / overrides)
  int64_t operator[](const std::string& name) const { return all.at(name); }
};

Widths resolve_widths(const ExpectedFeatures& model, const SynthOptions& o) {
  Widths w;
  w.all = model.features;
  for (const auto& [name, value] : model.defaults) w.all[name] = value;
  for (const auto& [name, value] : o.widths) {
    ZEST_CHECK(model.defaults.count(name) != 0, "zest data synth: '", name, "' is not an open width of ",
               model.model, " (fixed by the model, or unknown)");
    ZEST_CHECK(value > 0, "zest data synth: ", name, " = ", value, " must be > 0");
    w.all[name] = value;
  }
  return w;
}

void check_frame_range(const Widths& w) {
  ZEST_CHECK(w["min_frames"] <= w["max_frames"], "zest data synth: min_frames ", w["min_frames"],
             " > max_frames ", w["max_frames"]);
}

torch::Dtype text_dtype(const Widths& w) { return w["text_dim"] >= 1024 ? torch::kBFloat16 : torch::kFloat32; }

safetensors::NamedTensors motion_shard(const World& world, const Widths& w, uint64_t seed, int64_t first,
                                       int64_t n) {
  std::vector<torch::Tensor> motion, tokens, masks, pooled;
  std::vector<int64_t> offsets{0};
  for (int64_t i = first; i < first + n; ++i) {
    throw_if_interrupted("writing the synthetic dataset");
    auto gen = generator(mix_seed(seed, 1, static_cast<uint64_t>(i)));
    const auto code = randn({kCode}, gen);
    const int64_t valid = uniform_int(std::max<int64_t>(1, w["text_tokens"] / 2), w["text_tokens"], gen);
    const int64_t frames = uniform_int(w["min_frames"], w["max_frames"], gen);
    const Text text = make_text(world, code, w["text_tokens"], valid, gen);
    motion.push_back(make_motion(world, code, frames, gen));
    offsets.push_back(offsets.back() + frames);
    tokens.push_back(text.tokens);
    masks.push_back(text.mask);
    pooled.push_back(text.pooled);
  }
  return {{"motion", torch::cat(motion)},
          {"motion_offsets", torch::tensor(offsets, torch::kInt64)},
          {"text_tokens", torch::stack(tokens).to(text_dtype(w))},
          {"text_mask", torch::stack(masks)},
          {"text_pooled", torch::stack(pooled)}};
}

safetensors::NamedTensors latent_shard(const World& world, const Widths& w, uint64_t seed, int64_t first,
                                       int64_t n) {
  std::vector<torch::Tensor> latents, tokens, pooled, time_ids;
  const double h = double(w["height"]) * 8.0, wd = double(w["width"]) * 8.0;  // pixel size (VAE factor 8)
  for (int64_t i = first; i < first + n; ++i) {
    throw_if_interrupted("writing the synthetic dataset");
    auto gen = generator(mix_seed(seed, 2, static_cast<uint64_t>(i)));
    const auto code = randn({kCode}, gen);
    const Text text = make_text(world, code, w["text_tokens"], w["text_tokens"], gen);
    latents.push_back(make_latents(world, code, w["height"], w["width"], gen));
    tokens.push_back(text.tokens);
    pooled.push_back(text.pooled);
    time_ids.push_back(torch::tensor({h, wd, 0.0, 0.0, h, wd}, torch::kFloat32));
  }
  safetensors::NamedTensors shard{{"latents", torch::stack(latents)},
                                  {"text_embeds_seq", torch::stack(tokens).to(text_dtype(w))}};
  if (w["pooled_dim"] > 0) shard.emplace_back("pooled", torch::stack(pooled));
  if (w["time_ids"] != 0) shard.emplace_back("time_ids", torch::stack(time_ids));
  return shard;
}

int64_t motion_bytes(const Widths& w) { return w["max_frames"] * w["motion_dim"] * 4; }
int64_t latent_bytes(const Widths& w) { return w["channels"] * w["height"] * w["width"] * 4; }

void write_stats(const fs::path& file, const std::string& staging, const DatasetManifest& m) {
  write_motion_stats(file.string(), compute_motion_stats(staging, m));
}

// What `zest data synth` writes for each dataset format (the formats: data/dataset_formats.cpp), one row each.
struct SynthFormat {
  DatasetFormat format;
  const char* channels;                        // the width of the target's channels
  void (*check_widths)(const Widths&);         // beyond each being positive; nullptr = none
  int64_t (*target_bytes)(const Widths&);      // one sample's target at its largest (shard sizing)
  safetensors::NamedTensors (*shard)(const World&, const Widths&, uint64_t seed, int64_t first, int64_t n);
  const char* stats_file;                      // the normalisation statistics written beside the shards, or ""
  void (*stats)(const fs::path& file, const std::string& staging, const DatasetManifest& m);
};

const SynthFormat& synth_format(DatasetFormat format) {
  static const SynthFormat formats[] = {
      {DatasetFormat::motion, "motion_dim", check_frame_range, motion_bytes, motion_shard, "stats.safetensors",
       write_stats},
      {DatasetFormat::latents, "channels", nullptr, latent_bytes, latent_shard, "", nullptr},
  };
  for (const SynthFormat& f : formats)
    if (f.format == format) return f;
  ZEST_FAIL("zest data synth has no generator for ", format_name(format));
}

int64_t bytes_per_sample(const SynthFormat& format, const Widths& w) {
  const int64_t text = w["text_tokens"] * w["text_dim"] * (text_dtype(w) == torch::kBFloat16 ? 2 : 4);
  return text + format.target_bytes(w);
}

// Largest dataset `zest data synth` writes (and widths it accepts): far above any test or demo.
constexpr int64_t kMaxSamples = int64_t{1} << 32;
constexpr int64_t kMaxWidth = int64_t{1} << 16;

std::string shard_name(int64_t shard) {
  char name[64];
  std::snprintf(name, sizeof(name), "shard-%05lld.safetensors", static_cast<long long>(shard));
  return name;
}

// The new dataset is written into a staging folder inside `dir` and moved into place only when it is
// complete: an error or a stop signal removes the staging folder and leaves `dir` as it was.
class Staging {
 public:
  explicit Staging(const fs::path& dir) : path_(dir / (".zest-synth-" + std::to_string(::getpid()))) {
    fs::remove_all(path_);  // a leftover of an earlier process with this pid: ours by its name
    fs::create_directory(path_);
  }
  ~Staging() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The files of the dataset already in `dir` (its own listing's names, confined to `dir`), or none.
std::vector<fs::path> previous_files(const std::string& dir, bool overwrite) {
  const fs::path listing = fs::path(dir) / "dataset.json";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(listing, ec))) return {};
  ZEST_CHECK(overwrite, dir, " already holds a dataset (dataset.json); pass --overwrite to replace it");
  const DatasetManifest old = read_manifest(dir);  // refuses names outside the folder
  std::vector<fs::path> files;
  for (size_t i = 0; i < old.shards.size(); ++i)
    files.emplace_back(confined_path(dir, old.shards[i].file, {listing.string(), str("shards[", i, "].file")}, false));
  if (!old.stats_file.empty())
    files.emplace_back(confined_path(dir, old.stats_file, {listing.string(), "stats"}, false));
  return files;
}

// Nothing the new dataset writes may replace a file the old listing does not name: `zest data synth`
// deletes or overwrites only what it wrote.
void check_targets_free(const std::string& dir, const std::vector<std::string>& names,
                        const std::vector<fs::path>& previous) {
  for (const std::string& name : names) {
    const fs::path target = fs::path(dir) / name;
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(target, ec))) continue;
    const bool listed = std::find(previous.begin(), previous.end(), target) != previous.end();
    ZEST_CHECK(listed, target.string(), " exists and is not part of a dataset listed in ", dir,
               "/dataset.json; zest data synth does not replace files it did not write (move it away, or use "
               "another --out)");
  }
}

// The old dataset's files go (dataset.json first: a folder without it is no dataset), the new ones move in,
// and dataset.json comes last (a folder with dataset.json is a complete dataset).
void commit(const std::string& dir, const Staging& staging, const std::vector<std::string>& names,
            const std::vector<fs::path>& previous, const DatasetManifest& m) {
  fs::remove(fs::path(dir) / "dataset.json");
  for (const fs::path& file : previous) fs::remove(file);
  for (const std::string& name : names) fs::rename(staging.path() / name, fs::path(dir) / name);
  write_manifest(dir, m);
}

}  // namespace

DatasetManifest synthesize_dataset(const std::string& dir, const ExpectedFeatures& model, const SynthOptions& o) {
  ZEST_CHECK(o.samples >= 1 && o.samples <= kMaxSamples, "zest data synth: --samples ", o.samples,
             " must be in [1, ", kMaxSamples, "]");
  const SynthFormat& format = synth_format(model.format);
  const Widths w = resolve_widths(model, o);
  if (format.check_widths != nullptr) format.check_widths(w);
  for (const auto& [name, value] : w.all)
    ZEST_CHECK(value <= kMaxWidth, "zest data synth: ", name, " = ", value, " is more than the ", kMaxWidth,
               " accepted");
  fs::create_directories(dir);
  const std::vector<fs::path> previous = previous_files(dir, o.overwrite);
  const int64_t channels = w[format.channels];
  const int64_t per_shard = o.samples_per_shard > 0
                                ? o.samples_per_shard
                                : std::clamp<int64_t>((128 << 20) / bytes_per_sample(format, w), 1, 4096);
  std::vector<std::string> names;
  for (int64_t first = 0, shard = 0; first < o.samples; first += per_shard, ++shard) names.push_back(shard_name(shard));
  const int64_t shards = static_cast<int64_t>(names.size());
  const bool stats = *format.stats_file != '\0';
  if (stats) names.push_back(format.stats_file);
  check_targets_free(dir, names, previous);

  const World world = make_world(o.seed, w["text_dim"], w["pooled_dim"], channels);
  DatasetManifest m;
  m.format = model.format;
  for (const char* name : {"motion_dim", "channels", "height", "width", "text_tokens", "text_dim", "pooled_dim",
                           "time_ids"})
    if (w.all.count(name) != 0) m.features[name] = w[name];
  m.source = !o.source.empty() ? o.source
                               : str("zest data synth for ", model.model, ", ", o.samples, " samples, seed ", o.seed);
  const Staging staging(dir);
  for (int64_t first = 0, shard = 0; first < o.samples; first += per_shard, ++shard) {
    throw_if_interrupted(str("writing ", dir, " (shard ", shard + 1, " of ", shards, ")"));
    const int64_t n = std::min(per_shard, o.samples - first);
    const std::string name = shard_name(shard);
    const safetensors::NamedTensors tensors = format.shard(world, w, o.seed, first, n);
    safetensors::save_file((staging.path() / name).string(), tensors, {{"format", format_name(m.format)}});
    m.shards.push_back({name, n});
  }
  if (stats) {
    m.stats_file = format.stats_file;
    format.stats(staging.path() / m.stats_file, staging.path().string(), m);
  }
  throw_if_interrupted(str("writing ", dir));
  commit(dir, staging, names, previous, m);
  return m;
}

}  // namespace zest
