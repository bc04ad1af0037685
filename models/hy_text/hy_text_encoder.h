// HY-Motion's text encoders in C++ (the release's HYTextModel.encode): Qwen3's last hidden state of the chat
// text, padded to crop_start + max_length tokens, cropped from crop_start to max_length rows with the valid
// length clamped to [0, max_length]; and CLIP ViT-L/14's pooled text output (77 tokens, truncated). The
// features equal the release's for the same text (tests/hytext).
#pragma once

#include "models/clip/clip_text_model.h"
#include "models/clip/clip_tokenizer.h"
#include "models/qwen3/qwen3_model.h"
#include "models/qwen3/qwen_tokenizer.h"

#include <torch/torch.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace zest::hytext {

// The release's folder names (ckpts/Qwen3-8B, ckpts/clip-vit-large-patch14 in its repository).
inline constexpr const char* kQwenFolderName = "Qwen3-8B";
inline constexpr const char* kClipFolderName = "clip-vit-large-patch14";
// The text tokens HY-Motion releases are trained with (HYTextModel's max_length_llm in their configs).
inline constexpr int64_t kDefaultMaxTextTokens = 128;

struct TextEncoderFolders {
  std::filesystem::path qwen, clip;
};

// `text_encoders` given: its Qwen3-8B/ and clip-vit-large-patch14/. Else the release's layout: those folders
// beside the release folder or up to two levels above it (ckpts/Qwen3-8B beside ckpts/tencent/HY-Motion-1.0),
// also under a ckpts/ there. A missing folder is one message saying where it was looked for.
TextEncoderFolders find_text_encoders(const std::string& release_dir, const std::string& text_encoders);

struct MotionTextFeatures {
  torch::Tensor ctxt;         // [B, max_length, qwen hidden] float32, CPU (rows past the length: the padding's states)
  torch::Tensor ctxt_length;  // [B] int64: valid rows
  torch::Tensor vtxt;         // [B, clip hidden] float32, CPU: CLIP's pooler_output
};

// The token ids the release's Qwen call makes: [B, crop_start + max_length] int64 padded on the right with
// the tokenizer's pad id, truncated on the right, and the attention mask (1 = token).
struct LlmTokens {
  torch::Tensor ids, mask;
};

class HyTextEncoder {
 public:
  // Loads both encoders onto `device`, Qwen3 in `qwen_dtype` (the release: bf16), CLIP in float32.
  HyTextEncoder(const TextEncoderFolders& folders, torch::Device device, torch::Dtype qwen_dtype,
                int64_t max_length = kDefaultMaxTextTokens);

  LlmTokens llm_tokens(const std::vector<std::string>& captions) const;
  MotionTextFeatures encode(const std::vector<std::string>& captions) const;

  int64_t crop_start() const { return crop_start_; }
  int64_t max_length() const { return max_length_; }
  int64_t ctxt_dim() const;
  int64_t vtxt_dim() const;
  const TextEncoderFolders& folders() const { return folders_; }

 private:
  TextEncoderFolders folders_;
  torch::Device device_;
  int64_t max_length_;
  std::optional<qwen3::QwenTokenizer> qwen_tokenizer_;
  qwen3::Qwen3Model qwen_{nullptr};
  int64_t crop_start_ = 0;
  std::optional<clip::CLIPTokenizer> clip_tokenizer_;
  clip::CLIPTextModel clip_{nullptr};
};

}  // namespace zest::hytext
