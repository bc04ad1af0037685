// zest data prepare motions: the per-piece work (read the clips, encode the captions, save), resume from
// finished pieces, and the final assembly (shards, statistics, dataset.json), as the image prepare does.
#include "data/motion_prepare.h"

#include "checkpoint/checksum.h"
#include "comm/communicator.h"
#include "core/check.h"
#include "core/interrupt.h"
#include "core/untrusted_file.h"
#include "data/image_prepare.h"
#include "data/model_features.h"
#include "data/motion_clip.h"
#include "data/motion_stats.h"
#include "formats/json_text.h"
#include "formats/safetensors.h"
#include "models/hy_text/hy_text_encoder.h"
#include "models/pretrained_source.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <ostream>

namespace zest {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const CaptionedFolderKind kMotionFolder{{".npy"}, "motion clip", "a motion clip", "--motions"};

torch::Device choose_motion_device(const std::string& requested, int local_rank) {
  if (!requested.empty()) return torch::Device(requested);
  if (torch::cuda::is_available()) {
    const auto count = static_cast<int>(torch::cuda::device_count());
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % count));
  }
  return torch::Device(torch::kCPU);
}

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
  checkpoint::Xxh64Stream hash;
  for (const CaptionedImage& clip : listing.images) {
    hash.update(clip.file.data(), clip.file.size() + 1);  // with the terminating NUL as separator
    hash.update(clip.caption.data(), clip.caption.size() + 1);
  }
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
                    {"listing_xxh64", checkpoint::to_hex(hash.digest())}};
  return job.dump(2) + "\n";
}

std::string motion_piece_path(const fs::path& work, int64_t piece) {
  char name[64];
  std::snprintf(name, sizeof name, "piece-%06lld.safetensors", static_cast<long long>(piece));
  return (work / "pieces" / name).string();
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

void write_shards(const fs::path& staging, const fs::path& work, const std::vector<MotionSampleRef>& samples,
                  int64_t shard_samples, DatasetManifest& m) {
  std::map<int64_t, std::unique_ptr<safetensors::Reader>> readers;
  auto reader = [&](int64_t piece) -> const safetensors::Reader& {
    auto& r = readers[piece];
    if (!r) r = std::make_unique<safetensors::Reader>(motion_piece_path(work, piece));
    return *r;
  };
  for (size_t start = 0; start < samples.size(); start += static_cast<size_t>(shard_samples)) {
    throw_if_interrupted("writing the dataset");
    const size_t end = std::min(samples.size(), start + static_cast<size_t>(shard_samples));
    std::vector<torch::Tensor> motion, tokens, mask, pooled;
    std::vector<int64_t> offsets{0};
    for (size_t i = start; i < end; ++i) {
      const safetensors::Reader& r = reader(samples[i].piece);
      const std::string key = "." + std::to_string(samples[i].key);
      motion.push_back(r.read("motion" + key));
      offsets.push_back(offsets.back() + motion.back().size(0));
      tokens.push_back(r.read("text_tokens" + key));
      mask.push_back(r.read("text_mask" + key));
      pooled.push_back(r.read("text_pooled" + key));
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

void write_motion_dataset(const fs::path& staging, const fs::path& work, int64_t pieces, const hytext::HyTextEncoder& encoder,
                   const std::map<std::string, int64_t>& widths, const PrepareMotionsOptions& o,
                   const ImageFolderListing& listing, PrepareMotionsReport& report) {
  std::vector<MotionSampleRef> samples;
  for (int64_t p = 0; p < pieces; ++p) {
    const PieceRecords records(safetensors::Reader(motion_piece_path(work, p)));
    const std::vector<JsonField> items = records.items();
    for (size_t k = 0; k < items.size(); ++k) samples.push_back({p, static_cast<int64_t>(k), items[k].at("index").integer(0)});
    for (SkippedFile& s : records.skipped()) report.skipped.push_back(std::move(s));
  }
  if (samples.empty()) {
    fs::remove_all(work);  // nothing to resume: a rerun starts afresh
    const std::string why = report.skipped.empty() ? "" : " (" + report.skipped.front().file + ": " + report.skipped.front().reason + ")";
    ZEST_FAIL(printable(o.motions), ": none of the ", listing.images.size(), " motion clips could be used", why);
  }
  fs::remove_all(staging);
  fs::create_directories(staging);
  DatasetManifest m;
  m.format = DatasetFormat::motion;
  m.features = {{"motion_dim", widths.at("motion_dim")}, {"text_tokens", encoder.max_length()},
                {"text_dim", encoder.ctxt_dim()}, {"pooled_dim", encoder.vtxt_dim()}};
  write_shards(staging, work, samples, o.shard_samples, m);
  m.stats_file = "stats.safetensors";
  write_motion_stats((staging / m.stats_file).string(), compute_motion_stats(staging.string(), m));
  {
    std::ofstream skipped(staging / "skipped.txt");
    for (const SkippedFile& s : report.skipped) skipped << printable(s.file) << "\t" << printable(s.reason, 1000) << "\n";
    ZEST_CHECK(skipped.good(), (staging / "skipped.txt").string(), ": write failed");
  }
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
  const fs::path out(o.out);
  ZEST_CHECK(!fs::exists(out) || (fs::is_directory(out) && fs::is_empty(out)), printable(o.out),
             ": already exists and is not an empty folder; choose a new --out (a dataset is written whole, never over another)");
}

// Rank 0 records the job (or checks it against the unfinished one), and removes pieces cut off by a kill.
void start_or_resume(const fs::path& work, const std::string& job, const std::string& out) {
  if (fs::exists(work / "job.json")) {
    const std::string saved = read_text_file((work / "job.json").string(), "prepare job description");
    ZEST_CHECK(saved == job, printable((work / "job.json").string()), ": an unfinished prepare into ", printable(out),
               " was started with other options or another clip listing; rerun it with the same ones to continue, ",
               "or remove ", printable(work.string()), " to start over");
  } else {
    fs::create_directories(work / "pieces");
    std::ofstream(work / "job.json.tmp") << job;
    fs::rename(work / "job.json.tmp", work / "job.json");
  }
  for (const auto& entry : fs::directory_iterator(work / "pieces"))
    if (entry.path().extension() == ".tmp") fs::remove(entry.path());
}

}  // namespace

PrepareMotionsReport prepare_motions(const PrepareMotionsOptions& o, Communicator& comm, std::ostream& log) {
  check_options(o);
  const std::map<std::string, int64_t> widths = release_widths(o.pretrained);
  const hytext::TextEncoderFolders folders = hytext::find_text_encoders(o.pretrained, o.text_encoders);
  const ImageFolderListing listing = list_captioned_folder(o.motions, o.caption_column, kMotionFolder);
  const torch::Device device = choose_motion_device(o.device, comm.local_rank());
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
  const auto total = static_cast<int64_t>(listing.images.size());
  const int64_t pieces = (total + o.piece_clips - 1) / o.piece_clips;
  report.pieces_total = pieces;
  const fs::path work(prepare_work_folder(o.out));
  if (comm.rank() == 0) start_or_resume(work, motion_job_description(o, listing, folders, qwen_dtype), o.out);
  comm.barrier();

  torch::NoGradGuard no_grad;
  const auto started = std::chrono::steady_clock::now();
  int64_t done = 0;
  for (int64_t p = comm.rank(); p < pieces; p += comm.size()) {
    const std::string path = motion_piece_path(work, p);
    const int64_t first = p * o.piece_clips, last = std::min(total, first + o.piece_clips);
    if (fs::exists(path)) {
      ++report.pieces_reused;
      continue;
    }
    MotionPieceWriter writer(encoder, o.batch_size);
    for (int64_t i = first; i < last; ++i) {
      const std::string& file = listing.images[i].file;
      throw_if_interrupted(str("preparing ", file, " (finished pieces are kept in ", work.string(),
                               "; rerun the same command to continue)"));
      try {
        writer.add(i, listing.images[i].caption, read_motion_clip((fs::path(o.motions) / file).string(), limits));
      } catch (const Error& err) {
        writer.skip(file, err.what());
      }
    }
    writer.save(path);
    done += last - first;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    log << "prepare" << (comm.size() > 1 ? str(" [rank ", comm.rank(), "]") : std::string()) << ": piece " << p + 1
        << "/" << pieces << ", " << done << " clips in " << str(static_cast<int64_t>(seconds * 10) / 10.0) << " s ("
        << str(static_cast<int64_t>(done / std::max(seconds, 1e-3) * 10) / 10.0) << " clips/s)\n"
        << std::flush;
  }
  comm.barrier();  // every piece is finished
  if (comm.rank() == 0) {
    report.skipped = listing.skipped;
    const fs::path staging = work / "dataset";
    write_motion_dataset(staging, work, pieces, encoder, widths, o, listing, report);
    throw_if_interrupted("writing the dataset");
    const fs::path out(o.out);
    if (fs::exists(out)) fs::remove(out);  // the empty folder the user made
    if (out.has_parent_path()) fs::create_directories(out.parent_path());
    fs::rename(staging, out);
    fs::remove_all(work);
  }
  comm.barrier();
  return report;
}

}  // namespace zest
