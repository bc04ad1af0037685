// zest data prepare motions: the per-piece work (read the clips, encode the captions, save), resume from
// finished pieces, and the final assembly (shards, statistics, dataset.json), as the image prepare does.
#include "data/motion_prepare.h"

#include "comm/communicator.h"
#include "core/check.h"
#include "core/interrupt.h"
#include "core/untrusted_file.h"
#include "data/model_features.h"
#include "data/motion_clip.h"
#include "data/motion_stats.h"
#include "data/prepare_work.h"
#include "formats/safetensors.h"
#include "models/hy_text/hy_text_encoder.h"
#include "models/pretrained_source.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <ostream>

namespace zest {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const CaptionedFolderKind kMotionFolder{{".npy"}, "motion clip", "a motion clip", "--motions"};

// The widths the release's network takes: motion_dim, text_dim, pooled_dim.
std::map<std::string, int64_t> release_widths(const std::string& release) {
  ZEST_CHECK(fs::is_directory(release), printable(release), ": no such folder (--pretrained names a HY-Motion release "
             "folder: config.yml + latest.ckpt)");
  const ExpectedFeatures expected = model_features(resolve_pretrained_folder(release));
  ZEST_CHECK(expected.format == DatasetFormat::motion, printable(release), ": is not a HY-Motion release (",
             expected.model, ")");
  return expected.features;
}

std::string motion_job_description(const PrepareMotionsOptions& o, const ImageFolderListing& listing,
                                   const hytext::TextEncoderFolders& folders, torch::Dtype qwen_dtype) {
  const Json job = {{"format", "zest.prepare_motions.v1"},
                    {"pretrained", fs::absolute(o.pretrained).lexically_normal().string()},
                    {"motions", fs::absolute(o.motions).lexically_normal().string()},
                    {"qwen", fs::absolute(folders.qwen).lexically_normal().string()},
                    {"clip", fs::absolute(folders.clip).lexically_normal().string()},
                    {"qwen_dtype", std::string(c10::toString(qwen_dtype))},
                    {"caption_column", o.caption_column},
                    {"text_tokens", o.text_tokens},
                    {"max_frames", o.max_frames},
                    {"piece_clips", o.piece_clips},
                    {"clip_count", listing.images.size()},
                    {"listing_xxh64", listing_digest(listing)}};
  return job.dump(2) + "\n";
}

// Text features are kept as bf16 at the released encoders' widths (as zest data synth stores them), else float32.
torch::Dtype stored_text_dtype(int64_t text_dim) { return text_dim >= 1024 ? torch::kBFloat16 : torch::kFloat32; }

class MotionPieceWriter {
 public:
  MotionPieceWriter(const hytext::HyTextEncoder& encoder, int64_t batch_size) : encoder_(encoder), batch_size_(batch_size) {}

  void add(int64_t index, const std::string& caption, torch::Tensor clip) {
    pending_.push_back({index, caption, std::move(clip)});
    if (static_cast<int64_t>(pending_.size()) >= batch_size_) flush();
  }
  void skip(const std::string& file, const std::string& reason) { skipped_.push_back({{"file", file}, {"reason", reason}}); }

  void save(const std::string& path) {
    flush();
    safetensors::save_file(path, tensors_, {{"items", items_.dump()}, {"skipped", skipped_.dump()}});
  }

 private:
  struct Pending {
    int64_t index;
    std::string caption;
    torch::Tensor clip;
  };

  void flush() {
    if (pending_.empty()) return;
    std::vector<std::string> captions;
    for (const Pending& p : pending_) captions.push_back(p.caption);
    const hytext::MotionTextFeatures text = encoder_.encode(captions);
    const torch::Dtype dtype = stored_text_dtype(text.ctxt.size(2));
    for (size_t i = 0; i < pending_.size(); ++i) {
      const auto b = static_cast<int64_t>(i);
      const std::string key = "." + std::to_string(items_.size());
      const int64_t length = text.ctxt_length[b].item<int64_t>();
      tensors_.emplace_back("motion" + key, pending_[i].clip);
      tensors_.emplace_back("text_tokens" + key, text.ctxt[b].to(dtype).contiguous());
      tensors_.emplace_back("text_mask" + key, torch::arange(text.ctxt.size(1)) < length);
      tensors_.emplace_back("text_pooled" + key, text.vtxt[b].contiguous());
      items_.push_back({{"index", pending_[i].index}});
    }
    pending_.clear();
  }

  const hytext::HyTextEncoder& encoder_;
  int64_t batch_size_;
  std::vector<Pending> pending_;
  safetensors::NamedTensors tensors_;
  Json items_ = Json::array();
  Json skipped_ = Json::array();
};

struct MotionSampleRef {
  int64_t piece = 0, key = 0, index = 0;
};

void write_shards(const fs::path& staging, FinishedPieces& finished, const std::vector<MotionSampleRef>& samples,
                  int64_t shard_samples, DatasetManifest& m) {
  for (size_t start = 0; start < samples.size(); start += static_cast<size_t>(shard_samples)) {
    throw_if_interrupted("writing the dataset");
    const size_t end = std::min(samples.size(), start + static_cast<size_t>(shard_samples));
    std::vector<torch::Tensor> motion, tokens, mask, pooled;
    std::vector<int64_t> offsets{0};
    for (size_t i = start; i < end; ++i) {
      auto read = [&](const std::string& name) { return finished.read(samples[i].piece, samples[i].key, name); };
      motion.push_back(read("motion"));
      offsets.push_back(offsets.back() + motion.back().size(0));
      tokens.push_back(read("text_tokens"));
      mask.push_back(read("text_mask"));
      pooled.push_back(read("text_pooled"));
    }
    char name[48];
    std::snprintf(name, sizeof name, "shard-%05zu.safetensors", m.shards.size());
    safetensors::save_file((staging / name).string(),
                           {{"motion", torch::cat(motion)}, {"motion_offsets", torch::tensor(offsets, torch::kInt64)},
                            {"text_tokens", torch::stack(tokens)}, {"text_mask", torch::stack(mask)},
                            {"text_pooled", torch::stack(pooled)}});
    m.shards.push_back({name, static_cast<int64_t>(end - start)});
  }
}

void write_motion_dataset(const fs::path& staging, const PrepareWork& work, int64_t pieces,
                          const hytext::HyTextEncoder& encoder, const std::map<std::string, int64_t>& widths,
                          const PrepareMotionsOptions& o, const ImageFolderListing& listing, PrepareMotionsReport& report) {
  FinishedPieces finished(work, pieces);
  std::vector<MotionSampleRef> samples;
  for (const FinishedPieces::Sample& s : finished.samples())
    samples.push_back({s.piece, s.key, s.record.at("index").integer(0)});
  report.skipped.insert(report.skipped.end(), finished.skipped().begin(), finished.skipped().end());
  if (samples.empty()) work.fail_nothing_usable(o.motions, listing.images.size(), "motion clips", report.skipped);
  DatasetManifest m;
  m.format = DatasetFormat::motion;
  m.features = {{"motion_dim", widths.at("motion_dim")}, {"text_tokens", encoder.max_length()},
                {"text_dim", encoder.ctxt_dim()}, {"pooled_dim", encoder.vtxt_dim()}};
  write_shards(staging, finished, samples, o.shard_samples, m);
  m.stats_file = "stats.safetensors";
  write_motion_stats((staging / m.stats_file).string(), compute_motion_stats(staging.string(), m));
  write_skipped_list(staging, report.skipped);
  m.source = str("zest data prepare motions --pretrained ", o.pretrained, " --motions ", o.motions, " --text-tokens ",
                 o.text_tokens, " (", listing.captions_from, "; Qwen3 ", encoder.folders().qwen.string(), ", CLIP ",
                 encoder.folders().clip.string(), ")");
  write_manifest(staging.string(), m);
  report.manifest = m;
  report.samples = static_cast<int64_t>(samples.size());
}

void check_options(const PrepareMotionsOptions& o) {
  ZEST_CHECK(!o.out.empty(), "zest data prepare motions: --out DATASET is required");
  ZEST_CHECK(o.text_tokens >= 1 && o.text_tokens <= 4096, "--text-tokens ", o.text_tokens, " must be 1 to 4096");
  ZEST_CHECK(o.max_frames >= 1 && o.max_frames <= 1'000'000, "--max-frames ", o.max_frames, " must be 1 to 1000000");
  ZEST_CHECK(o.batch_size >= 1 && o.piece_clips >= 1 && o.shard_samples >= 1, "batch, piece and shard sizes must be >= 1");
  check_new_dataset_folder(o.out);
}

}  // namespace

PrepareMotionsReport prepare_motions(const PrepareMotionsOptions& o, Communicator& comm, std::ostream& log) {
  check_options(o);
  const std::map<std::string, int64_t> widths = release_widths(o.pretrained);
  const hytext::TextEncoderFolders folders = hytext::find_text_encoders(o.pretrained, o.text_encoders);
  const ImageFolderListing listing = list_captioned_folder(o.motions, o.caption_column, kMotionFolder);
  const torch::Device device = prepare_device(o.device, comm.local_rank());
  // Qwen3 in bf16 on a GPU, as the release runs it; float32 on the CPU (where bf16 matmuls are slow).
  const torch::Dtype qwen_dtype = device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
  const hytext::HyTextEncoder encoder(folders, device, qwen_dtype, o.text_tokens);
  ZEST_CHECK(encoder.ctxt_dim() == widths.at("text_dim") && encoder.vtxt_dim() == widths.at("pooled_dim"),
             printable(o.pretrained), ": the network takes text features of ", widths.at("text_dim"), " (Qwen3) and ",
             widths.at("pooled_dim"), " (CLIP), but ", printable(folders.qwen.string()), " gives ", encoder.ctxt_dim(),
             " and ", printable(folders.clip.string()), " gives ", encoder.vtxt_dim());
  const MotionClipLimits limits{widths.at("motion_dim"), o.max_frames};

  PrepareMotionsReport report;
  report.captions_from = listing.captions_from;
  PrepareWork work(comm, o.out, motion_job_description(o, listing, folders, qwen_dtype), "clips", "clip listing");
  torch::NoGradGuard no_grad;
  const auto write_piece = [&](int64_t first, int64_t last, const std::string& path) {
    MotionPieceWriter writer(encoder, o.batch_size);
    for (int64_t i = first; i < last; ++i) {
      const std::string& file = listing.images[i].file;
      work.throw_if_interrupted_preparing(file);
      try {
        writer.add(i, listing.images[i].caption, read_motion_clip((fs::path(o.motions) / file).string(), limits));
      } catch (const Error& err) {
        writer.skip(file, err.what());
      }
    }
    writer.save(path);
  };
  const PieceCount pieces = work.write_pieces(static_cast<int64_t>(listing.images.size()), o.piece_clips, log, write_piece);
  report.pieces_total = pieces.total;
  report.pieces_reused = pieces.reused;
  work.publish([&](const fs::path& staging) {
    report.skipped = listing.skipped;
    write_motion_dataset(staging, work, pieces.total, encoder, widths, o, listing, report);
  });
  return report;
}

}  // namespace zest
