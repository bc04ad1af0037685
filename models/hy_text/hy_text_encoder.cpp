// HY-Motion's text encoders (see hy_text_encoder.h): finding the folders, loading, and the release's
// feature rule.
#include "models/hy_text/hy_text_encoder.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "models/hy_text/motion_prompt.h"
#include "models/qwen3/qwen3_load.h"

namespace zest::hytext {
namespace {

namespace fs = std::filesystem;

bool holds_both(const fs::path& dir) {
  return fs::is_directory(dir / kQwenFolderName) && fs::is_directory(dir / kClipFolderName);
}

}  // namespace

TextEncoderFolders find_text_encoders(const std::string& release_dir, const std::string& text_encoders) {
  if (!text_encoders.empty()) {
    const fs::path dir(text_encoders);
    ZEST_CHECK(fs::is_directory(dir), printable(text_encoders), ": no such folder (--text-encoders names the folder "
               "holding ", kQwenFolderName, "/ and ", kClipFolderName, "/)");
    for (const char* name : {kQwenFolderName, kClipFolderName}) {
      ZEST_CHECK(fs::is_directory(dir / name), printable(text_encoders), ": has no ", name, "/ (--text-encoders names ",
                 "the folder holding ", kQwenFolderName, "/ and ", kClipFolderName, "/, as the hub's Qwen/Qwen3-8B and ",
                 "openai/clip-vit-large-patch14 download into)");
    }
    return {dir / kQwenFolderName, dir / kClipFolderName};
  }
  std::vector<std::string> tried;
  fs::path dir = fs::absolute(fs::path(release_dir)).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  for (int up = 0; up <= 3 && !dir.empty(); ++up, dir = dir.parent_path()) {
    for (const fs::path& candidate : {dir, dir / "ckpts"}) {
      if (holds_both(candidate)) return {candidate / kQwenFolderName, candidate / kClipFolderName};
      tried.push_back(candidate.string());
    }
    if (dir == dir.root_path()) break;
  }
  std::string where;
  for (size_t i = 0; i < tried.size(); ++i) where += (i ? ", " : "") + printable(tried[i], 120);
  ZEST_FAIL("HY-Motion's text encoders were not found: no folder holding ", kQwenFolderName, "/ and ", kClipFolderName,
            "/ in ", where, ". Give --text-encoders DIR (the folder holding both), or lay them out as the release ",
            "does (ckpts/", kQwenFolderName, " and ckpts/", kClipFolderName, " beside ckpts/tencent/HY-Motion-1.0)");
}

HyTextEncoder::HyTextEncoder(const TextEncoderFolders& folders, torch::Device device, torch::Dtype qwen_dtype,
                             int64_t max_length)
    : folders_(folders), device_(device), max_length_(max_length) {
  ZEST_CHECK(max_length >= 1 && max_length <= 4096, "HY-Motion text tokens: ", max_length, " must be 1 to 4096");
  qwen_tokenizer_.emplace(qwen3::QwenTokenizer::from_folder(folders.qwen));
  for (const char* token : {"<|im_start|>", "<|im_end|>"}) {
    ZEST_CHECK(qwen_tokenizer_->has_token(token), qwen_tokenizer_->source(), ": has no ", token,
               " token: not a Qwen3 chat tokenizer");
  }
  crop_start_ = motion_crop_start(*qwen_tokenizer_);
  qwen_ = qwen3::load_qwen3_model(folders.qwen, device, qwen_dtype);
  ZEST_CHECK(crop_start_ + max_length_ <= qwen_->config().max_position_embeddings, printable(folders.qwen.string()),
             ": the chat text needs ", crop_start_ + max_length_, " positions, more than max_position_embeddings = ",
             qwen_->config().max_position_embeddings);
  ZEST_CHECK(qwen_tokenizer_->size() <= qwen_->config().vocab_size, qwen_tokenizer_->source(), ": has ids up to ",
             qwen_tokenizer_->size() - 1, ", beyond the model's vocab_size ", qwen_->config().vocab_size);
  clip_tokenizer_.emplace(clip::CLIPTokenizer::from_folder(folders.clip));
  clip_ = clip::load_clip_text_model(folders.clip, torch::TensorOptions().device(device));
  clip_->eval();
  ZEST_CHECK(clip_tokenizer_->max_length() <= clip_->config().max_position_embeddings, printable(folders.clip.string()),
             ": the tokenizer's ", clip_tokenizer_->max_length(), " tokens exceed the text model's ",
             clip_->config().max_position_embeddings, " positions");
}

int64_t HyTextEncoder::ctxt_dim() const { return qwen_->config().hidden_size; }
int64_t HyTextEncoder::vtxt_dim() const { return clip_->config().hidden_size; }

LlmTokens HyTextEncoder::llm_tokens(const std::vector<std::string>& captions) const {
  const int64_t length = crop_start_ + max_length_;
  const auto batch = static_cast<int64_t>(captions.size());
  torch::Tensor ids = torch::full({batch, length}, qwen_tokenizer_->pad_id(), torch::kInt64);
  torch::Tensor mask = torch::zeros({batch, length}, torch::kInt64);
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<int64_t> row = qwen_tokenizer_->encode(motion_chat_text(captions[b]), static_cast<size_t>(length));
    const auto n = static_cast<int64_t>(row.size());
    ids[b].narrow(0, 0, n).copy_(torch::tensor(row, torch::kInt64));
    mask[b].narrow(0, 0, n).fill_(1);
  }
  return {ids, mask};
}

MotionTextFeatures HyTextEncoder::encode(const std::vector<std::string>& captions) const {
  ZEST_CHECK(!captions.empty(), "HY-Motion text encoder: no captions to encode");
  torch::NoGradGuard no_grad;
  const LlmTokens tokens = llm_tokens(captions);
  const torch::Tensor hidden = qwen_->forward(tokens.ids.to(device_), tokens.mask.to(device_)).last_hidden_state;
  MotionTextFeatures out;
  out.ctxt = hidden.narrow(1, crop_start_, max_length_).to(torch::kCPU, torch::kFloat32).contiguous();
  out.ctxt_length = (tokens.mask.sum(-1) - crop_start_).clamp(0, max_length_);
  std::vector<torch::Tensor> rows;
  for (const std::string& caption : captions) rows.push_back(torch::tensor(clip_tokenizer_->encode_padded(caption), torch::kInt64));
  out.vtxt = clip_->forward(torch::stack(rows).to(device_)).pooled.to(torch::kCPU, torch::kFloat32).contiguous();
  return out;
}

}  // namespace zest::hytext
