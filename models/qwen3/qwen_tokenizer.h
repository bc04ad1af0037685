// Qwen's tokenizer (Qwen2/Qwen3 releases' tokenizer.json + tokenizer_config.json), giving the ids
// transformers' Qwen2Tokenizer gives: added tokens cut out of the raw text first (leftmost, longest), each
// stretch between them NFC-normalised, split by Qwen's pre-tokenizer rule (qwen_pretokenize.h) and encoded
// by byte-level BPE (byte_level_bpe.h). Qwen adds no begin or end token.
#pragma once

#include "models/qwen3/byte_level_bpe.h"

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace zest::qwen3 {

// The longest text encode() accepts (bytes); captions are a few hundred. Longer text is refused, so that a
// hostile caption file cannot make the tokenizer work for minutes.
inline constexpr size_t kMaxTokenizerTextBytes = size_t{1} << 20;

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool special = false;
};

class QwenTokenizer {
 public:
  // Reads folder/tokenizer.json (and tokenizer_config.json for the padding token, "<|endoftext|>" when it
  // says none). A tokenizer.json of another kind (not byte-level BPE, another normalizer or split rule, added
  // tokens that strip spaces) is refused naming the file and the field: its ids would not be Qwen's.
  static QwenTokenizer from_folder(const std::filesystem::path& folder);

  // The ids of `text` (at most max_tokens: the first ones, exactly as truncating the whole would give).
  // Text longer than kMaxTokenizerTextBytes is an error; invalid UTF-8 becomes U+FFFD.
  std::vector<int64_t> encode(std::string_view text, size_t max_tokens = std::numeric_limits<size_t>::max()) const;

  // The id of an added token or vocabulary entry; an error naming the tokenizer when it has none.
  int64_t token_id(const std::string& token) const;
  bool has_token(const std::string& token) const;
  int64_t pad_id() const { return pad_id_; }
  int64_t size() const { return size_; }  // largest id + 1
  const std::string& source() const { return source_; }

 private:
  QwenTokenizer(ByteLevelBpe bpe, std::vector<AddedToken> added, std::string source);
  void encode_stretch(std::string_view text, size_t max_tokens, std::vector<int64_t>& ids) const;

  ByteLevelBpe bpe_;
  std::vector<AddedToken> added_;                  // longest first
  std::vector<std::vector<size_t>> added_by_byte_;  // first byte → indices into added_
  std::string source_;
  int64_t pad_id_ = -1;
  int64_t size_ = 0;
};

}  // namespace zest::qwen3
