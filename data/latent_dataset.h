// LatentDataset (format zest.latents.v1): VAE latents with cached text embeddings (and SDXL's pooled
// embedding and size/crop ids), served under the UNet's input names; aspect-ratio buckets (a latent size
// per shard) and caption dropout to the empty prompt's embedding.
#pragma once

#include "data/dataset.h"

namespace zest {

// A sample: sample [channels, height, width] float32 (the shard's size), encoder_hidden_states
// [text_tokens, text_dim] float32, and when the dataset has them text_embeds [pooled_dim] and time_ids [6].
class LatentDataset final : public Dataset {
 public:
  LatentDataset(std::string dir, DatasetManifest manifest, const DatasetOptions& options);

  Sample get(int64_t index, uint64_t seed) const override;
  SampleBytes sample_bytes() const override;
  int64_t items_in(const Sample& batch) const override;  // latent pixels
  std::vector<int64_t> sample_groups() const override;

  // Whether the sample with this seed trains on the empty caption (probability caption_dropout).
  bool drops_caption(uint64_t seed) const;

 private:
  struct LatentSize {
    int64_t height = 0, width = 0;
  };
  void validate_shard(size_t shard) const;
  LatentSize size_of(size_t shard) const;
  void load_empty_prompt();

  int64_t channels_ = 0;
  int64_t height_ = 0;
  int64_t width_ = 0;
  int64_t text_tokens_ = 0;
  int64_t text_dim_ = 0;
  int64_t pooled_dim_ = 0;  // 0: no text_embeds
  bool time_ids_ = false;
  double caption_dropout_ = 0.0;
  torch::Tensor empty_tokens_;  // [text_tokens, text_dim] float32, when caption_dropout > 0
  torch::Tensor empty_pooled_;  // [pooled_dim]
};

}  // namespace zest
