// zest data prepare images: the pipeline's encoders, the per-piece work (decode, preprocess, encode,
// save), resume from finished pieces, and the final assembly of the dataset (shards by latent size).
#include "data/image_prepare.h"

#include "formats/safetensors.h"
#include "comm/communicator.h"
#include "core/check.h"
#include "core/interrupt.h"
#include "core/untrusted_file.h"
#include "data/aspect_buckets.h"
#include "data/image_preprocess.h"
#include "data/prepare_work.h"
#include "data/seed.h"
#include "models/clip/clip_text_model.h"
#include "models/clip/clip_tokenizer.h"
#include "models/vae/autoencoder_kl.h"

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <ostream>

namespace zest {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// The pipeline's VAE and text side, loaded from its folder.
struct Encoders {
  vae::AutoencoderKL vae{nullptr};
  std::optional<clip::CLIPTokenizer> tokenizer;
  clip::CLIPTextModel text_encoder{nullptr};
  std::optional<clip::CLIPTokenizer> tokenizer_2;  // SDXL
  clip::CLIPTextModel text_encoder_2{nullptr};
  torch::Device device{torch::kCPU};

  bool sdxl() const { return !text_encoder_2.is_empty(); }
  int64_t downscale() const { return int64_t{1} << (vae->config().block_out_channels.size() - 1); }
  int64_t text_tokens() const { return tokenizer->max_length(); }
  int64_t text_dim() const {
    return text_encoder->config().hidden_size + (sdxl() ? text_encoder_2->config().hidden_size : 0);
  }
  int64_t pooled_dim() const { return sdxl() ? text_encoder_2->config().projection_dim : 0; }
};

void require_folder(const fs::path& pipeline, const std::string& name, const std::string& why) {
  const fs::path p = pipeline / name;
  ZEST_CHECK(fs::is_directory(p), printable(p.string()), ": missing (", why, "; a pipeline folder as diffusers' ",
             "save_pretrained writes it holds unet/ vae/ text_encoder/ tokenizer/, for SDXL also text_encoder_2/ tokenizer_2/)");
}

Encoders load_encoders(const std::string& pipeline_dir, torch::Device device) {
  const fs::path pipeline(pipeline_dir);
  ZEST_CHECK(fs::is_directory(pipeline), printable(pipeline_dir), ": no such folder (--pretrained needs a pipeline folder)");
  require_folder(pipeline, "vae", "the VAE encodes the images");
  require_folder(pipeline, "text_encoder", "the text encoder encodes the captions");
  require_folder(pipeline, "tokenizer", "the tokenizer of text_encoder");
  const bool has2 = fs::exists(pipeline / "text_encoder_2"), has_tok2 = fs::exists(pipeline / "tokenizer_2");
  ZEST_CHECK(has2 == has_tok2, printable(pipeline_dir), ": has ", has2 ? "text_encoder_2/ but no tokenizer_2/" : "tokenizer_2/ but no text_encoder_2/",
             " (SDXL's second text encoder needs both)");
  const auto options = torch::TensorOptions().device(device);
  Encoders e;
  e.device = device;
  e.vae = vae::load_autoencoder_kl(pipeline / "vae", options);
  e.tokenizer.emplace(clip::CLIPTokenizer::from_folder(pipeline / "tokenizer"));
  e.text_encoder = clip::load_clip_text_model(pipeline / "text_encoder", options);
  if (has2) {
    e.tokenizer_2.emplace(clip::CLIPTokenizer::from_folder(pipeline / "tokenizer_2"));
    e.text_encoder_2 = clip::load_clip_text_model(pipeline / "text_encoder_2", options);
    ZEST_CHECK(e.text_encoder_2->with_projection(), printable((pipeline / "text_encoder_2").string()),
               ": SDXL's second text encoder must be a CLIPTextModelWithProjection (its pooled, projected output ",
               "conditions the UNet)");
    ZEST_CHECK(e.tokenizer_2->max_length() == e.tokenizer->max_length(), printable(pipeline_dir),
               ": tokenizer/ and tokenizer_2/ have different lengths (", e.tokenizer->max_length(), ", ",
               e.tokenizer_2->max_length(), ")");
  }
  e.vae->eval();
  e.text_encoder->eval();
  if (has2) e.text_encoder_2->eval();
  return e;
}

torch::Tensor token_ids(const clip::CLIPTokenizer& tokenizer, const std::vector<std::string>& captions,
                        torch::Device device) {
  std::vector<torch::Tensor> rows;
  for (const std::string& c : captions) rows.push_back(torch::tensor(tokenizer.encode_padded(c), torch::kInt64));
  return torch::stack(rows).to(device);
}

struct TextStates {
  torch::Tensor tokens;  // [B, T, text_dim]
  torch::Tensor pooled;  // [B, pooled_dim] (SDXL), else undefined
};

// SD1.5: text_encoder's last_hidden_state. SDXL: both encoders' hidden_states[-2] concatenated, and
// text_encoder_2's projected pooled output (what diffusers' encode_prompt computes).
TextStates encode_text(const Encoders& e, const std::vector<std::string>& captions) {
  const clip::CLIPTextOutput first = e.text_encoder->forward(token_ids(*e.tokenizer, captions, e.device));
  if (!e.sdxl()) return {first.last_hidden_state.to(torch::kCPU, torch::kFloat32), {}};
  const clip::CLIPTextOutput second = e.text_encoder_2->forward(token_ids(*e.tokenizer_2, captions, e.device));
  return {torch::cat({first.penultimate(), second.penultimate()}, -1).to(torch::kCPU, torch::kFloat32),
          second.text_embeds.to(torch::kCPU, torch::kFloat32)};
}

// latent_dist.sample(torch.Generator().manual_seed(seed)) · scaling_factor, one image at a time so that each
// image's noise depends on its own seed only (not on the batch it was encoded in).
torch::Tensor encode_images(const Encoders& e, const torch::Tensor& pixels, const std::vector<uint64_t>& seeds) {
  // A batch of one is encoded as two copies: with N = 1 the VAE's CPU GroupNorm meets a tensor whose strides
  // suggest channels-last without being contiguous in it ("Expected X.is_contiguous(memory_format)").
  const torch::Tensor batch = pixels.size(0) == 1 ? pixels.expand({2, -1, -1, -1}).contiguous() : pixels;
  const vae::LatentDistribution dist = e.vae->encode(batch.to(e.device));
  std::vector<torch::Tensor> latents;
  for (size_t i = 0; i < seeds.size(); ++i) {
    const auto k = static_cast<int64_t>(i);
    const vae::LatentDistribution one{dist.mean.narrow(0, k, 1), dist.logvar.narrow(0, k, 1)};
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seeds[i]);
    latents.push_back(e.vae->to_unet_latents(one.sample(gen))[0].to(torch::kCPU, torch::kFloat32));
  }
  return torch::stack(latents);
}

std::string job_description(const PrepareImagesOptions& o, const ImageFolderListing& listing) {
  const Json job = {{"format", "zest.prepare.v1"},
                    {"pretrained", fs::absolute(o.pretrained).lexically_normal().string()},
                    {"images", fs::absolute(o.images).lexically_normal().string()},
                    {"resolution", o.resolution},
                    {"center_crop", o.center_crop},
                    {"random_flip", o.random_flip},
                    {"caption_column", o.caption_column},
                    {"buckets", o.buckets},
                    {"seed", o.seed},
                    {"piece_images", o.piece_images},
                    {"image_count", listing.images.size()},
                    {"listing_xxh64", listing_digest(listing)}};
  return job.dump(2) + "\n";
}

// One sample waiting for its batch: the pixels and everything else its piece records.
struct Pending {
  int64_t index = 0;  // in the listing
  PreparedImage image;
};

class PieceWriter {
 public:
  PieceWriter(const Encoders& e, const PrepareImagesOptions& o) : e_(e), o_(o) {}

  void add(int64_t index, const std::string& caption, PreparedImage image) {
    const Size2 size{image.pixels.size(1), image.pixels.size(2)};
    std::vector<Pending>& queue = pending_[size];
    queue.push_back({index, std::move(image)});
    captions_[index] = caption;
    if (static_cast<int64_t>(queue.size()) >= o_.batch_size) flush(size);
  }

  void skip(const std::string& file, const std::string& reason) { skipped_.push_back({{"file", file}, {"reason", reason}}); }

  void save(const std::string& path) {
    while (!pending_.empty()) flush(pending_.begin()->first);
    safetensors::Metadata metadata{{"items", items_.dump()}, {"skipped", skipped_.dump()}};
    safetensors::save_file(path, tensors_, metadata);  // PATH.tmp, then renamed: a piece is whole or absent
  }

 private:
  void flush(Size2 size) {
    std::vector<Pending> batch = std::move(pending_[size]);
    pending_.erase(size);
    if (batch.empty()) return;
    std::vector<torch::Tensor> pixels;
    std::vector<uint64_t> seeds;
    std::vector<std::string> captions;
    for (const Pending& p : batch) {
      pixels.push_back(p.image.pixels);
      seeds.push_back(o_.seed + static_cast<uint64_t>(p.index));
      captions.push_back(captions_.at(p.index));
    }
    const torch::Tensor latents = encode_images(e_, torch::stack(pixels), seeds);
    const TextStates text = encode_text(e_, captions);
    for (size_t i = 0; i < batch.size(); ++i) {
      const auto k = static_cast<int64_t>(items_.size());
      const std::string key = std::to_string(k);
      tensors_.emplace_back("latents." + key, latents[static_cast<int64_t>(i)].contiguous());
      tensors_.emplace_back("text_embeds_seq." + key, text.tokens[static_cast<int64_t>(i)].contiguous());
      if (text.pooled.defined()) tensors_.emplace_back("pooled." + key, text.pooled[static_cast<int64_t>(i)].contiguous());
      const auto& t = batch[i].image.time_ids;
      tensors_.emplace_back("time_ids." + key, torch::tensor({t[0], t[1], t[2], t[3], t[4], t[5]}, torch::kFloat32));
      items_.push_back({{"index", batch[i].index}, {"height", latents.size(2)}, {"width", latents.size(3)}});
    }
  }

  const Encoders& e_;
  const PrepareImagesOptions& o_;
  std::map<Size2, std::vector<Pending>> pending_;
  std::map<int64_t, std::string> captions_;
  safetensors::NamedTensors tensors_;
  Json items_ = Json::array();
  Json skipped_ = Json::array();
};

// Preprocessing target of one image: the square resolution, or its aspect bucket.
Size2 target_of(const RgbImage& image, const PrepareImagesOptions& o, const std::vector<Size2>& buckets) {
  if (!o.buckets) return {o.resolution, o.resolution};
  return nearest_bucket(buckets, {image.height, image.width});
}

// Assembly (rank 0): every piece's samples, grouped by latent size and ordered by listing index.
struct SampleRef {
  int64_t piece = 0;
  int64_t key = 0;  // k of the piece's tensors
  int64_t index = 0;
  int64_t height = 0, width = 0;
};

void write_dataset(const fs::path& staging, const PrepareWork& work, int64_t pieces, const Encoders& e,
                   const PrepareImagesOptions& o, const ImageFolderListing& listing, PrepareImagesReport& report) {
  std::optional<FinishedPieces> finished(std::in_place, work, pieces);
  std::vector<SampleRef> samples;
  for (const FinishedPieces::Sample& s : finished->samples())
    samples.push_back({s.piece, s.key, s.record.at("index").integer(0), s.record.at("height").integer(1),
                       s.record.at("width").integer(1)});
  report.skipped.insert(report.skipped.end(), finished->skipped().begin(), finished->skipped().end());
  if (samples.empty()) work.fail_nothing_usable(o.images, listing.images.size(), "images", report.skipped);
  std::stable_sort(samples.begin(), samples.end(), [](const SampleRef& a, const SampleRef& b) {
    return a.height != b.height ? a.height < b.height : a.width != b.width ? a.width < b.width : a.index < b.index;
  });
  DatasetManifest m;
  m.format = DatasetFormat::latents;
  const int64_t f = e.downscale();
  m.features = {{"channels", e.vae->config().latent_channels}, {"height", o.resolution / f}, {"width", o.resolution / f},
                {"text_tokens", e.text_tokens()}, {"text_dim", e.text_dim()}, {"pooled_dim", e.pooled_dim()},
                {"time_ids", e.sdxl() ? 1 : 0}};
  for (size_t start = 0; start < samples.size();) {
    size_t end = start;
    while (end < samples.size() && static_cast<int64_t>(end - start) < o.shard_samples &&
           samples[end].height == samples[start].height && samples[end].width == samples[start].width)
      ++end;
    throw_if_interrupted("writing the dataset");
    std::vector<torch::Tensor> latents, tokens, pooled, time_ids;
    for (size_t i = start; i < end; ++i) {
      auto read = [&](const std::string& name) { return finished->read(samples[i].piece, samples[i].key, name); };
      latents.push_back(read("latents"));
      tokens.push_back(read("text_embeds_seq"));
      if (e.sdxl()) pooled.push_back(read("pooled"));
      time_ids.push_back(read("time_ids"));
    }
    safetensors::NamedTensors shard{{"latents", torch::stack(latents)}, {"text_embeds_seq", torch::stack(tokens)}};
    if (e.sdxl()) {
      shard.emplace_back("pooled", torch::stack(pooled));
      shard.emplace_back("time_ids", torch::stack(time_ids));
    }
    char name[48];
    std::snprintf(name, sizeof name, "shard-%05zu.safetensors", m.shards.size());
    safetensors::save_file((staging / name).string(), shard);
    ShardEntry entry{name, static_cast<int64_t>(end - start)};
    if (o.buckets) {
      entry.height = samples[start].height;
      entry.width = samples[start].width;
    }
    m.shards.push_back(entry);
    start = end;
  }
  finished.reset();  // the pieces' files close before the text encoder runs again
  // The empty caption's embedding, for caption dropout ([data] caption_dropout).
  const TextStates empty = encode_text(e, {""});
  safetensors::NamedTensors empty_prompt{{"text_embeds_seq", empty.tokens[0].contiguous()}};
  if (e.sdxl()) empty_prompt.emplace_back("pooled", empty.pooled[0].contiguous());
  safetensors::save_file((staging / "empty_prompt.safetensors").string(), empty_prompt);
  m.empty_prompt_file = "empty_prompt.safetensors";
  write_skipped_list(staging, report.skipped);
  m.source = str("zest data prepare images --pretrained ", o.pretrained, " --images ", o.images, " --resolution ",
                 o.resolution, o.center_crop ? " --center-crop" : " --random-crop", o.random_flip ? " --random-flip" : "",
                 o.buckets ? " --buckets" : "", " --seed ", o.seed, " (", listing.captions_from, ")");
  write_manifest(staging.string(), m);
  report.manifest = m;
  report.samples = static_cast<int64_t>(samples.size());
}

}  // namespace

PrepareImagesReport prepare_images(const PrepareImagesOptions& o, Communicator& comm, std::ostream& log) {
  ZEST_CHECK(!o.out.empty(), "zest data prepare images: --out DATASET is required");
  ZEST_CHECK(o.resolution >= 8 && o.resolution <= 8192, "--resolution ", o.resolution, " must be between 8 and 8192 pixels");
  ZEST_CHECK(o.batch_size >= 1 && o.piece_images >= 1 && o.shard_samples >= 1, "batch, piece and shard sizes must be >= 1");
  check_new_dataset_folder(o.out);
  const Encoders e = load_encoders(o.pretrained, prepare_device(o.device, comm.local_rank()));
  // Bucket sides are multiples of 8 latent pixels, so that the UNet's downsamplings (3 in SD) divide them.
  const int64_t bucket_multiple = 8 * e.downscale();
  ZEST_CHECK(o.resolution % (o.buckets ? bucket_multiple : e.downscale()) == 0, "--resolution ", o.resolution,
             " must be a multiple of ", o.buckets ? bucket_multiple : e.downscale(), " (the VAE downscales by ",
             e.downscale(), o.buckets ? ", and bucket sides are multiples of 8 latent pixels" : "", ")");
  const ImageFolderListing listing = list_image_folder(o.images, o.caption_column);
  if (comm.rank() == 0)
    for (const std::string& note : listing.notes) log << "prepare: note: " << note << "\n";
  const std::vector<Size2> buckets = o.buckets ? aspect_buckets(o.resolution, bucket_multiple) : std::vector<Size2>{};

  PrepareImagesReport report;
  report.captions_from = listing.captions_from;
  PrepareWork work(comm, o.out, job_description(o, listing), "images", "image listing");
  torch::NoGradGuard no_grad;
  const auto write_piece = [&](int64_t first, int64_t last, const std::string& path) {
    PieceWriter writer(e, o);
    for (int64_t i = first; i < last; ++i) {
      const std::string& file = listing.images[i].file;
      work.throw_if_interrupted_preparing(file);
      std::optional<PreparedImage> prepared;
      try {
        const RgbImage image = decode_image_file((fs::path(o.images) / file).string(), o.limits);
        PreprocessOptions po;
        po.target = target_of(image, o, buckets);
        po.center_crop = o.center_crop;
        po.random_flip = o.random_flip;
        prepared = preprocess_image(image, po, mix_seed(o.seed, static_cast<uint64_t>(i)));
      } catch (const Error& err) {
        std::string reason = err.what();
        const std::string prefix = printable((fs::path(o.images) / file).string()) + ": ";
        if (reason.rfind(prefix, 0) == 0) reason = reason.substr(prefix.size());
        writer.skip(file, reason);
        continue;
      }
      writer.add(i, listing.images[i].caption, std::move(*prepared));
    }
    writer.save(path);
  };
  const PieceCount pieces = work.write_pieces(static_cast<int64_t>(listing.images.size()), o.piece_images, log, write_piece);
  report.pieces_total = pieces.total;
  report.pieces_reused = pieces.reused;
  work.publish([&](const fs::path& staging) {
    report.skipped = listing.skipped;
    write_dataset(staging, work, pieces.total, e, o, listing, report);
  });
  return report;
}

}  // namespace zest
