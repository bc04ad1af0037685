// Byte-level BPE (see byte_level_bpe.h). The merge loop keeps the piece's symbols as a doubly linked list
// over an array and a min-heap of candidate pairs (rank, left position); a popped candidate whose symbols
// have changed since it was pushed is stale and skipped.
#include "models/qwen3/byte_level_bpe.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "models/clip/unicode_text.h"

#include <array>
#include <queue>

namespace zest::qwen3 {
namespace {

std::array<std::string, 256> make_byte_symbols() {
  // Printable bytes stand for themselves; the others, in byte order, become U+0100, U+0101, ...
  std::array<std::string, 256> symbols;
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
    clip::append_utf8(cp, symbols[b]);
  }
  return symbols;
}

}  // namespace

const std::string& byte_symbol(uint8_t byte) {
  static const std::array<std::string, 256> symbols = make_byte_symbols();
  return symbols[byte];
}

ByteLevelBpe::ByteLevelBpe(std::unordered_map<std::string, int64_t> vocab,
                           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
                           const std::string& source)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges) {
  for (const auto& [token, id] : vocab_) {
    ZEST_CHECK(id >= 0 && id < (int64_t{1} << 31), source, ": token id ", id, " of '", printable(token, 40),
               "' is outside 0 .. 2^31");
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(byte_symbol(static_cast<uint8_t>(b)));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto l = vocab_.find(left), r = vocab_.find(right), m = vocab_.find(left + right);
    ZEST_CHECK(l != vocab_.end() && r != vocab_.end() && m != vocab_.end(), source, ": merge ", rank, " ('",
               printable(left, 40), "' '", printable(right, 40), "') names a token the vocabulary does not have");
    // The first of duplicated merges wins, as in tokenizers (a later duplicate never applies).
    merges_.try_emplace(pair_key(l->second, r->second), Merge{static_cast<int32_t>(rank), m->second});
  }
}

const ByteLevelBpe::Merge* ByteLevelBpe::find_merge(int64_t left, int64_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void ByteLevelBpe::encode_piece(std::string_view piece, std::vector<int64_t>& ids) const {
  if (ignore_merges_) {
    std::string spelled;
    for (const char c : piece) spelled += byte_symbol(static_cast<uint8_t>(c));
    if (const auto it = vocab_.find(spelled); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int64_t id;
    int32_t prev, next;  // -1: none
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (const char c : piece) {
    const int64_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id < 0) continue;
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, -1});
    if (n > 0) symbols[n - 1].next = n;
  }
  struct Candidate {
    int32_t rank, left;
    int64_t left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push = [&](int32_t left) {
    if (left < 0 || symbols[left].next < 0) return;
    const Symbol& a = symbols[left];
    const Symbol& b = symbols[a.next];
    if (const Merge* m = find_merge(a.id, b.id)) queue.push({m->rank, left, a.id, b.id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& a = symbols[top.left];
    if (a.id != top.left_id || a.next < 0 || symbols[a.next].id != top.right_id) continue;  // stale
    const int32_t right = a.next;
    a.id = find_merge(top.left_id, top.right_id)->merged;
    a.next = symbols[right].next;
    if (a.next >= 0) symbols[a.next].prev = top.left;
    symbols[right].id = -1;  // removed: no candidate can name it as its left any more
    push(a.prev);
    push(top.left);
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

}  // namespace zest::qwen3
