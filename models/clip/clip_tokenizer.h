// The CLIP byte-level BPE tokenizer of a pipeline folder's tokenizer/ (vocab.json + merges.txt +
// tokenizer_config.json / special_tokens_map.json), giving the token ids transformers' CLIPTokenizer gives.
#pragma once

#include <cstdint>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace zest::clip {

// How the text is cleaned before the BPE, i.e. which reference is reproduced (docs/pipeline_modules.md).
enum class TextCleaning {
  // transformers >= 5 CLIPTokenizer and transformers 4 CLIPTokenizerFast (the `tokenizers` library): NFC,
  // every run of white space becomes one space, per-character lower case.
  kTokenizersLibrary,
  // transformers 4 CLIPTokenizer when ftfy is not installed (its BasicTokenizer): control and format
  // characters removed, CJK ideographs split into words of their own, NFC, Python's str.lower().
  kPythonWithoutFtfy,
};

struct SpecialToken {
  std::string content;
  // With kTokenizersLibrary a normalized token is also matched in the cleaned (lower-cased) text, so
  // "<|ENDOFTEXT|>" is then the end token. Released configurations declare bos, eos and unk as AddedToken
  // objects with "normalized": true and SD1.5's pad as the plain string "<|endoftext|>", which is not
  // normalized; transformers declares them in the order bos, eos, unk, pad, and a string's last
  // declaration decides (so SD1.5's "<|ENDOFTEXT|>" is text, SDXL's tokenizer_2's the end token).
  bool normalized = true;
};

struct SpecialTokens {
  SpecialToken bos{"<|startoftext|>"};
  SpecialToken eos{"<|endoftext|>"};
  SpecialToken unk{"<|endoftext|>"};
  SpecialToken pad{"<|endoftext|>"};  // SDXL's tokenizer_2 pads with "!"
};

class CLIPTokenizer {
 public:
  // vocab: token → id (vocab.json); merges: the merge pairs in rank order (merges.txt without its header).
  CLIPTokenizer(std::unordered_map<std::string, int64_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                SpecialTokens special, int64_t max_length, TextCleaning cleaning);

  // Reads folder/vocab.json, folder/merges.txt and, when present, tokenizer_config.json and
  // special_tokens_map.json (special tokens, model_max_length). Bad or missing files: one message naming
  // the file and what was expected.
  static CLIPTokenizer from_folder(const std::filesystem::path& folder,
                                   TextCleaning cleaning = TextCleaning::kTokenizersLibrary);

  // bos, the caption's tokens, eos; no truncation (tokenizer(caption).input_ids).
  std::vector<int64_t> encode(std::string_view text) const;
  // What the diffusers pipelines feed the text encoder: tokenizer(caption, padding="max_length",
  // max_length=model_max_length, truncation=True): the first max_length-1 ids of encode(), eos, padding.
  std::vector<int64_t> encode_padded(std::string_view text) const;
  // The caption's BPE tokens as strings (byte-level characters, "</w>" ending each word), for messages and
  // tests. With `max_tokens`, the first max_tokens of them, and the text after the word that completes them
  // is not tokenized (encode_padded keeps 75 of a caption's tokens, however long the caption).
  std::vector<std::string> tokenize(std::string_view text, size_t max_tokens = SIZE_MAX) const;

  int64_t bos_id() const { return bos_id_; }
  int64_t eos_id() const { return eos_id_; }
  int64_t pad_id() const { return pad_id_; }
  int64_t max_length() const { return max_length_; }
  size_t vocab_size() const { return vocab_.size(); }
  TextCleaning cleaning() const { return cleaning_; }

 private:
  // Cuts the special strings out of `text` (raw, or already cleaned) and tokenizes the stretches between.
  // Each stops once `tokens` holds `limit` tokens.
  void split_on_special(std::string_view text, bool cleaned, size_t limit, std::vector<std::string>& tokens) const;
  void append_stretch(std::string_view text, bool cleaned, size_t limit, std::vector<std::string>& tokens) const;
  void append_word(const std::u32string& word, std::vector<std::string>& tokens) const;
  std::vector<std::string> bpe(const std::u32string& word) const;
  std::vector<int64_t> ids_of(const std::vector<std::string>& tokens) const;  // bos, the tokens' ids, eos
  int64_t id_of(const std::string& token) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<std::string, int64_t> merge_ranks_;  // "first second" → rank
  std::vector<std::string> special_strings_;              // matched in the raw text, longest first
  std::vector<std::string> normalized_strings_;           // also matched in the cleaned text (kTokenizersLibrary)
  int64_t bos_id_, eos_id_, unk_id_, pad_id_;
  int64_t max_length_;
  TextCleaning cleaning_;
  std::string byte_symbol_[256];  // byte → its printable stand-in, UTF-8
};

}  // namespace zest::clip
