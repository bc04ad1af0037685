// Byte-level BPE (GPT-2's, Qwen's): a piece's UTF-8 bytes, each a symbol of its own, merged pair by pair in
// merge-rank order (the lowest rank first, the leftmost of equal ranks first) with a priority queue, so a piece
// of n bytes costs O(n log n) instead of the naive O(n²).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace zest::qwen3 {

// The printable stand-in of each byte (bytes_to_unicode of GPT-2), as UTF-8: what vocabularies spell tokens with.
const std::string& byte_symbol(uint8_t byte);

class ByteLevelBpe {
 public:
  // vocab: token (byte-level spelling) → id; merges: pairs of tokens in rank order. A merge whose parts or
  // result are not in the vocabulary is an error naming `source` and the merge's rank. ignore_merges: a
  // piece that is a token of its own is taken whole (tokenizers' BPE option).
  ByteLevelBpe(std::unordered_map<std::string, int64_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
               bool ignore_merges, const std::string& source);

  // Appends the ids of one pre-tokenized piece (UTF-8). Bytes without a token are dropped, as tokenizers'
  // BPE without an unknown token drops them.
  void encode_piece(std::string_view piece, std::vector<int64_t>& ids) const;

  const std::unordered_map<std::string, int64_t>& vocab() const { return vocab_; }

 private:
  struct Merge {
    int32_t rank;
    int64_t merged;
  };
  static uint64_t pair_key(int64_t left, int64_t right) {
    return (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int64_t left, int64_t right) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) → rank and the merged token's id
  int64_t byte_ids_[256];                       // -1: the byte has no token
  bool ignore_merges_;
};

}  // namespace zest::qwen3
