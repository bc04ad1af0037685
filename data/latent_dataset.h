// LatentDataset (format zest.latents.v1): VAE latents with cached text embeddings (and SDXL's pooled
// embedding and size/crop ids), served under the UNet's input names.
#pragma once

#include "data/dataset.h"

namespace zest {

// A sample: sample [channels, height, width] float32, encoder_hidden_states [text_tokens, text_dim]
// float32, and when the dataset has them text_embeds [pooled_dim] and time_ids [6] (float32).
class LatentDataset final : public Dataset {
 public:
  LatentDataset(std::string dir, DatasetManifest manifest);

  Sample get(int64_t index, uint64_t seed) const override;
  SampleBytes sample_bytes() const override;

 private:
  void validate_shard(size_t shard) const;

  int64_t channels_ = 0;
  int64_t height_ = 0;
  int64_t width_ = 0;
  int64_t text_tokens_ = 0;
  int64_t text_dim_ = 0;
  int64_t pooled_dim_ = 0;  // 0: no text_embeds
  bool time_ids_ = false;
};

}  // namespace zest
