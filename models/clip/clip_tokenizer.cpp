// CLIPTokenizer: special-token split, text cleaning, the pre-tokenisation pattern, byte-level symbols, BPE.
#include "models/clip/clip_tokenizer.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/json_field.h"
#include "formats/json_text.h"
#include "models/clip/unicode_text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <sstream>

namespace zest::clip {
namespace fs = std::filesystem;
namespace {

constexpr const char* kStartOfText = "<|startoftext|>";
constexpr const char* kEndOfText = "<|endoftext|>";
constexpr const char* kEndOfWord = "</w>";
constexpr size_t kMaxWordCodePoints = 4096;

// GPT-2's reversible byte → character table: printable Latin-1 bytes stand for themselves, the others
// (controls, space, ...) for U+0100 onwards in byte order.
void fill_byte_symbols(std::string (&symbols)[256]) {
  auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    symbols[b].clear();
    append_utf8(printable(b) ? static_cast<char32_t>(b) : next++, symbols[b]);
  }
}

bool is_cjk_ideograph(char32_t cp) {  // the CJK blocks BERT's BasicTokenizer splits into single characters
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// The tokenizers library's normalizer: NFC, each run of white space → " ", per-character lower case.
std::u32string clean_like_tokenizers(std::u32string_view text) {
  const std::u32string composed = nfc(text);
  std::u32string out;
  out.reserve(composed.size());
  for (size_t i = 0; i < composed.size(); ++i) {
    if (is_unicode_white_space(composed[i])) {
      out.push_back(U' ');
      while (i + 1 < composed.size() && is_unicode_white_space(composed[i + 1])) ++i;
    } else {
      append_lowercase(composed[i], out);
    }
  }
  return out;
}

// Python's str.lower() of one white-space-free word, with its final-sigma rule approximated: a capital
// sigma after a letter and not before one becomes the final form.
void append_python_lower(std::u32string_view word, std::u32string& out) {
  for (size_t i = 0; i < word.size(); ++i) {
    if (word[i] == U'\u03A3') {
      const bool after_letter = i > 0 && is_letter(word[i - 1]);
      const bool before_letter = i + 1 < word.size() && is_letter(word[i + 1]);
      out.push_back(after_letter && !before_letter ? U'\u03C2' : U'\u03C3');
    } else {
      append_lowercase(word[i], out);
    }
  }
}

// transformers 4's BasicTokenizer(strip_accents=False, do_split_on_punc=False): drop NUL, U+FFFD and
// category-C characters except \t \n \r; white space → " "; spaces around CJK ideographs; NFC; split on
// white space; lower case each word; join with " ".
std::u32string clean_like_python(std::u32string_view text) {
  std::u32string cleaned;
  cleaned.reserve(text.size());
  for (const char32_t cp : text) {
    const bool tab_or_newline = cp == U'\t' || cp == U'\n' || cp == U'\r';
    if (cp == 0 || cp == 0xFFFD || (is_other(cp) && !tab_or_newline)) continue;
    if (cp == U' ' || tab_or_newline || is_space_separator(cp)) {
      cleaned.push_back(U' ');
    } else if (is_cjk_ideograph(cp)) {
      cleaned.push_back(U' ');
      cleaned.push_back(cp);
      cleaned.push_back(U' ');
    } else {
      cleaned.push_back(cp);
    }
  }
  const std::u32string composed = nfc(cleaned);
  std::u32string out;
  size_t i = 0;
  while (i < composed.size()) {
    if (is_unicode_white_space(composed[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < composed.size() && !is_unicode_white_space(composed[end])) ++end;
    if (!out.empty()) out.push_back(U' ');
    append_python_lower(std::u32string_view(composed).substr(i, end - i), out);
    i = end;
  }
  return out;
}

bool starts_with(std::u32string_view text, size_t at, std::u32string_view prefix) {
  return text.substr(at, prefix.size()) == prefix;
}

// Length of the contraction ('s 't 're 've 'm 'll 'd) at `at`, 0 if none. Python's pattern is
// case-insensitive: after lower-casing that only adds the long s, which folds to s.
size_t contraction_length(std::u32string_view text, size_t at, bool ignore_case) {
  if (text[at] != U'\'' || at + 1 >= text.size()) return 0;
  const char32_t c = text[at + 1];
  if (c == U's' || c == U't' || c == U'm' || c == U'd' || (ignore_case && c == U'\u017F')) return 2;
  if (at + 2 < text.size()) {
    const char32_t d = text[at + 2];
    if ((c == U'r' && d == U'e') || (c == U'v' && d == U'e') || (c == U'l' && d == U'l')) return 3;
  }
  return 0;
}

// The pre-tokenisation pattern <|startoftext|>|<|endoftext|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|
// [^\s\p{L}\p{N}]+ as findall: white space between matches is dropped. The tokenizers library's pattern
// has no special-string alternatives (python_pattern false): a special string left in its cleaned text
// (one that is not normalized, SpecialToken) is split like any text, "<|" "endoftext" "|>".
std::vector<std::u32string> pre_tokenize(std::u32string_view text, bool python_pattern) {
  const bool ignore_case = python_pattern;
  static const std::u32string start = U"<|startoftext|>", end = U"<|endoftext|>";
  // Case-insensitive, the Python `regex` module matches the combining ypogegrammeni (U+0345, a mark whose
  // case variants are the letter iota) by neither class: it separates pieces and is dropped like a space.
  auto unmatched = [ignore_case](char32_t c) { return is_unicode_white_space(c) || (ignore_case && c == 0x345); };
  std::vector<std::u32string> pieces;
  size_t i = 0;
  while (i < text.size()) {
    const char32_t cp = text[i];
    size_t length = 0;
    if (python_pattern && starts_with(text, i, start)) {
      length = start.size();
    } else if (python_pattern && starts_with(text, i, end)) {
      length = end.size();
    } else if ((length = contraction_length(text, i, ignore_case)) != 0) {
    } else if (unmatched(cp)) {
      ++i;
      continue;
    } else if (is_letter(cp)) {
      length = 1;
      while (i + length < text.size() && is_letter(text[i + length])) ++length;
    } else if (is_number(cp)) {
      length = 1;
    } else {
      length = 1;
      while (i + length < text.size()) {
        const char32_t next = text[i + length];
        if (is_letter(next) || is_number(next) || unmatched(next)) break;
        ++length;
      }
    }
    pieces.emplace_back(text.substr(i, length));
    i += length;
  }
  return pieces;
}

// Every tokenizer file through the regular-file check and a size cap (a FIFO, /dev/zero or a sparse file
// of gigabytes is refused by name before it is read).
std::string read_file(const fs::path& path, uint64_t max_bytes) {
  if (!fs::exists(path))
    ZEST_FAIL(printable(path.string()), ": cannot be read (a CLIP tokenizer folder holds vocab.json and merges.txt, or tokenizer.json)");
  return read_text_file(path.string(), "CLIP tokenizer file", max_bytes);
}

nlohmann::json read_json(const fs::path& path, uint64_t max_bytes = kMaxConfigJsonBytes) {
  return parse_json(read_file(path, max_bytes), printable(path.string()));
}

// vocab.json, or tokenizer.json's "model"."vocab": token → id.
std::unordered_map<std::string, int64_t> vocab_of(const JsonField& vocab) {
  if (!vocab.is_object() || vocab.size() == 0) vocab.expected("an object mapping each token to its id");
  std::unordered_map<std::string, int64_t> out;
  out.reserve(vocab.size());
  for (const auto& [token, id] : vocab.members()) out.emplace(token, id.integer(0));
  return out;
}

std::unordered_map<std::string, int64_t> read_vocab(const fs::path& path) {
  const nlohmann::json document = read_json(path, kMaxVocabBytes);
  return vocab_of(JsonField(document, printable(path.string())));
}

// A merge written "first second": exactly two words, else nullopt.
std::optional<std::pair<std::string, std::string>> merge_of(const std::string& text) {
  std::istringstream fields(text);
  std::string first, second, extra;
  if (!(fields >> first >> second) || (fields >> extra)) return std::nullopt;
  return std::pair{std::move(first), std::move(second)};
}

std::vector<std::pair<std::string, std::string>> read_merges(const fs::path& path) {
  std::istringstream in(read_file(path, kMaxMergesBytes));
  std::vector<std::pair<std::string, std::string>> merges;
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_number == 1 && line.rfind("#version", 0) == 0)) continue;
    std::optional<std::pair<std::string, std::string>> merge = merge_of(line);
    if (!merge)
      ZEST_FAIL(printable(path.string()), ":", line_number, ": expected a merge \"first second\", found \"",
                printable(line, 80), "\"");
    merges.push_back(std::move(*merge));
  }
  if (merges.empty()) ZEST_FAIL(path.string(), ": no merges");
  return merges;
}

struct TokenizerFiles {
  std::unordered_map<std::string, int64_t> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
};

// tokenizer.json of a byte-level BPE: "model": {"type": "BPE", "vocab": {...}, "merges": ["a b", ...] or
// [["a", "b"], ...]}.
TokenizerFiles read_tokenizer_json(const fs::path& path) {
  const nlohmann::json document = read_json(path, kMaxVocabBytes);
  const JsonField model = JsonField(document, printable(path.string())).at("model");
  model.at("type").one_of({"BPE"});  // a CLIP tokenizer's
  TokenizerFiles files{vocab_of(model.at("vocab")), {}};
  const JsonField merges = model.at("merges");
  if (!merges.is_array() || merges.size() == 0) merges.expected("a non-empty array of merges");
  files.merges.reserve(merges.size());
  for (const JsonField& merge : merges.items()) {
    std::optional<std::pair<std::string, std::string>> pair;
    const std::vector<JsonField> words = merge.is_array() ? merge.items() : std::vector<JsonField>();
    if (words.size() == 2 && words[0].is_string() && words[1].is_string()) {
      pair.emplace(words[0].string(), words[1].string());
    } else if (merge.is_string()) {
      pair = merge_of(merge.string());
    }
    if (!pair) merge.expected("a merge \"first second\" or [first, second]");
    files.merges.push_back(std::move(*pair));
  }
  return files;
}

// A special token of tokenizer_config.json / special_tokens_map.json: a string (not normalized) or an
// AddedToken object (normalized as its "normalized" says; absent: not, the tokenizers library's default
// for special tokens). Null or absent: the default token.
void read_special(const JsonField& config, const char* key, SpecialToken& out) {
  const JsonField value = config.at(key);
  if (!value.exists()) return;
  if (value.is_string()) {
    out = {value.string(), false};
  } else if (value.is_object()) {
    out = {value.at("content").string(), value.at("normalized").boolean_or(false)};
  } else {
    value.expected("a string or {\"content\": ...}");
  }
}

// tokenizer_config.json or special_tokens_map.json: an object; nulls are Python's None (the default).
void read_special_tokens(const nlohmann::json& document, const fs::path& path, SpecialTokens& special,
                         int64_t* max_length) {
  const JsonField config = JsonField(document, printable(path.string())).null_as_absent();
  config.object();
  for (const auto& [key, target] : {std::pair{"bos_token", &special.bos}, {"eos_token", &special.eos},
                                    {"unk_token", &special.unk}, {"pad_token", &special.pad}}) {
    read_special(config, key, *target);
  }
  // The text encoder's sequence length (77 for CLIP).
  if (max_length != nullptr) *max_length = config.at("model_max_length").integer_or(*max_length, 2, 1'000'000);
}

}  // namespace

CLIPTokenizer::CLIPTokenizer(std::unordered_map<std::string, int64_t> vocab,
                             const std::vector<std::pair<std::string, std::string>>& merges, SpecialTokens special,
                             int64_t max_length, TextCleaning cleaning)
    : vocab_(std::move(vocab)), max_length_(max_length), cleaning_(cleaning) {
  fill_byte_symbols(byte_symbol_);
  merge_ranks_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    merge_ranks_.emplace(merges[rank].first + " " + merges[rank].second, static_cast<int64_t>(rank));
  }
  ZEST_CHECK(max_length_ >= 2, "a CLIP tokenizer needs model_max_length >= 2 (bos and eos), got ", max_length_);
  bos_id_ = id_of(special.bos.content);
  eos_id_ = id_of(special.eos.content);
  unk_id_ = id_of(special.unk.content);
  pad_id_ = id_of(special.pad.content);
  std::map<std::string, bool> normalized;  // a string's last declaration decides
  for (const SpecialToken* token : {&special.bos, &special.eos, &special.unk, &special.pad}) {
    normalized[token->content] = token->normalized;
  }
  for (const auto& [content, is_normalized] : normalized) {
    special_strings_.push_back(content);
    if (is_normalized) normalized_strings_.push_back(content);
  }
  for (std::vector<std::string>* strings : {&special_strings_, &normalized_strings_}) {
    std::stable_sort(strings->begin(), strings->end(),
                     [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  }
}

CLIPTokenizer CLIPTokenizer::from_folder(const fs::path& folder, TextCleaning cleaning) {
  if (!fs::is_directory(folder)) ZEST_FAIL(folder.string(), ": not a folder (expected a CLIP tokenizer folder)");
  SpecialTokens special;
  int64_t max_length = 77;
  const fs::path config_path = folder / "tokenizer_config.json";
  if (fs::exists(config_path)) read_special_tokens(read_json(config_path), config_path, special, &max_length);
  // As transformers does, special_tokens_map.json overrides what tokenizer_config.json says.
  const fs::path map_path = folder / "special_tokens_map.json";
  if (fs::exists(map_path)) read_special_tokens(read_json(map_path), map_path, special, nullptr);
  // Released folders (and transformers 4) hold vocab.json + merges.txt; transformers 5's save_pretrained
  // writes tokenizer.json alone, with the same vocabulary and merges under "model".
  const bool from_tokenizer_json = !fs::exists(folder / "vocab.json") && fs::exists(folder / "tokenizer.json");
  const fs::path vocab_path = folder / (from_tokenizer_json ? "tokenizer.json" : "vocab.json");
  TokenizerFiles files = from_tokenizer_json ? read_tokenizer_json(vocab_path)
                                             : TokenizerFiles{read_vocab(vocab_path), read_merges(folder / "merges.txt")};
  std::unordered_map<std::string, int64_t>& vocab = files.vocab;
  for (const SpecialToken* token : {&special.bos, &special.eos, &special.unk, &special.pad}) {
    if (!vocab.count(token->content)) {
      ZEST_FAIL(printable(vocab_path.string()), ": has no token \"", printable(token->content, 80),
                "\", which the tokenizer's configuration names ",
                "as a special token");
    }
  }
  return CLIPTokenizer(std::move(vocab), files.merges, special, max_length, cleaning);
}

int64_t CLIPTokenizer::id_of(const std::string& token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) ZEST_FAIL("CLIP vocabulary has no token \"", printable(token, 80), "\"");
  return it->second;
}

std::vector<std::string> CLIPTokenizer::bpe(const std::u32string& word) const {
  // Symbols start as the word's characters, "</w>" fused to the last. The reference merges the
  // lowest-ranked adjacent pair everywhere, left to right, until no adjacent pair is a merge; rescanning
  // the word per merge is quadratic, so candidates wait in a heap ordered by (rank, position) instead:
  // O(n log n). A pair that a merge of this rank creates with a lower rank waits until every pair of this
  // rank is merged, as in the reference's pass. A symbol only grows, so a candidate whose two symbols no
  // longer have the sizes it saw is stale.
  struct Symbol {
    std::string text;
    int prev, next;
  };
  struct Candidate {
    int64_t rank;
    int left;
    size_t left_size, right_size;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  const int n = static_cast<int>(word.size());
  std::vector<Symbol> symbols(word.size());
  for (int i = 0; i < n; ++i) symbols[i] = {utf8_encode(std::u32string(1, word[i])), i - 1, i + 1 < n ? i + 1 : -1};
  symbols.back().text += kEndOfWord;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  std::vector<Candidate> deferred;
  int64_t pass_rank = -1;
  auto candidate_at = [&](int left, bool may_defer) {
    if (left < 0 || symbols[left].next < 0) return;
    const Symbol& right = symbols[symbols[left].next];
    const auto it = merge_ranks_.find(symbols[left].text + " " + right.text);
    if (it == merge_ranks_.end()) return;
    const Candidate c{it->second, left, symbols[left].text.size(), right.text.size()};
    if (may_defer && c.rank < pass_rank) deferred.push_back(c);
    else heap.push(c);
  };
  for (int i = 0; i + 1 < n; ++i) candidate_at(i, false);
  while (true) {
    if (!deferred.empty() && (heap.empty() || heap.top().rank != pass_rank)) {  // this rank's pass is over
      for (const Candidate& d : deferred) heap.push(d);
      deferred.clear();
    }
    if (heap.empty()) break;
    const Candidate c = heap.top();
    pass_rank = c.rank;
    heap.pop();
    Symbol& left = symbols[c.left];
    if (left.text.size() != c.left_size || left.next < 0 || symbols[left.next].text.size() != c.right_size) continue;
    Symbol& right = symbols[left.next];
    left.text += right.text;
    right.text.clear();  // absorbed: every candidate naming it is stale
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = c.left;
    candidate_at(left.prev, true);
    candidate_at(c.left, true);
  }
  std::vector<std::string> out;
  for (int i = 0; i >= 0; i = symbols[i].next) out.push_back(std::move(symbols[i].text));
  return out;
}

void CLIPTokenizer::append_word(const std::u32string& piece, std::vector<std::string>& tokens) const {
  // A pre-token longer than any word (no vocabulary holds one) is cut: the BPE's cost stays bounded,
  // and only such a word's own tokens can differ from the reference's.
  if (piece.size() > kMaxWordCodePoints) {
    append_word(piece.substr(0, kMaxWordCodePoints), tokens);
    return;
  }
  const std::string utf8 = utf8_encode(piece);
  // transformers 4's Python BPE keeps the two special strings whole (its cache starts with them).
  if (cleaning_ == TextCleaning::kPythonWithoutFtfy && (utf8 == kStartOfText || utf8 == kEndOfText)) {
    tokens.push_back(utf8);
    return;
  }
  std::u32string word;
  word.reserve(utf8.size());
  for (const char byte : utf8) {
    const std::u32string symbol = utf8_decode(byte_symbol_[static_cast<unsigned char>(byte)]);
    word += symbol;
  }
  for (std::string& token : bpe(word)) tokens.push_back(std::move(token));
}

void CLIPTokenizer::split_on_special(std::string_view text, bool cleaned, size_t limit,
                                     std::vector<std::string>& tokens) const {
  // Leftmost, longest special string first; each stretch between them is handled on its own.
  size_t from = 0;
  size_t i = 0;
  while (i < text.size() && tokens.size() < limit) {
    const std::string* found = nullptr;
    for (const std::string& special : cleaned ? normalized_strings_ : special_strings_) {
      if (text.substr(i, special.size()) == special) {
        found = &special;
        break;
      }
    }
    if (!found) {
      ++i;
      continue;
    }
    append_stretch(text.substr(from, i - from), cleaned, limit, tokens);
    if (tokens.size() >= limit) return;
    tokens.push_back(*found);
    i += found->size();
    from = i;
  }
  append_stretch(text.substr(from), cleaned, limit, tokens);
}

void CLIPTokenizer::append_stretch(std::string_view text, bool cleaned, size_t limit,
                                   std::vector<std::string>& tokens) const {
  if (text.empty() || tokens.size() >= limit) return;
  // Words past the limit are not run through the BPE (a word's own tokens are all made: the BPE of a
  // word's beginning depends on its end).
  auto append_words = [&](const std::vector<std::u32string>& pieces) {
    for (size_t k = 0; k < pieces.size() && tokens.size() < limit; ++k) append_word(pieces[k], tokens);
  };
  if (cleaned) {
    append_words(pre_tokenize(utf8_decode(text), /*python_pattern=*/false));
    return;
  }
  const std::u32string code_points = utf8_decode(text);
  if (cleaning_ == TextCleaning::kPythonWithoutFtfy) {
    append_words(pre_tokenize(clean_like_python(code_points), /*python_pattern=*/true));
    return;
  }
  // The tokenizers library matches the normalized special tokens again in the normalized text (see
  // SpecialToken::normalized).
  split_on_special(utf8_encode(clean_like_tokenizers(code_points)), /*cleaned=*/true, limit, tokens);
}

std::vector<std::string> CLIPTokenizer::tokenize(std::string_view text, size_t max_tokens) const {
  // The special tokens are cut out of the raw text first, as transformers' added-token split does.
  // With a token limit the text goes in pieces of a few KB cut before an ASCII white space (where no
  // cleaning step, special string or pre-token spans the cut), until the limit is reached: a caption
  // of megabytes costs what its first tokens cost.
  constexpr size_t kPieceBytes = 4096;
  std::vector<std::string> tokens;
  size_t from = 0;
  while (from < text.size() && tokens.size() < max_tokens) {
    size_t end = text.size();
    if (max_tokens != SIZE_MAX && text.size() - from > kPieceBytes) {
      end = text.find_first_of(" \t\n\r", from + kPieceBytes);
      if (end == std::string_view::npos) end = text.size();
    }
    split_on_special(text.substr(from, end - from), /*cleaned=*/false, max_tokens, tokens);
    from = end;
  }
  if (tokens.size() > max_tokens) tokens.resize(max_tokens);
  return tokens;
}

std::vector<int64_t> CLIPTokenizer::encode(std::string_view text) const { return ids_of(tokenize(text)); }

std::vector<int64_t> CLIPTokenizer::ids_of(const std::vector<std::string>& tokens) const {
  std::vector<int64_t> ids{bos_id_};
  for (const std::string& token : tokens) {
    const auto it = vocab_.find(token);
    ids.push_back(it == vocab_.end() ? unk_id_ : it->second);
  }
  ids.push_back(eos_id_);
  return ids;
}

std::vector<int64_t> CLIPTokenizer::encode_padded(std::string_view text) const {
  // Truncation keeps bos, the first max_length - 2 tokens and eos: only those are made.
  std::vector<int64_t> ids = ids_of(tokenize(text, static_cast<size_t>(max_length_ - 2)));
  ids.resize(max_length_, pad_id_);
  return ids;
}

}  // namespace zest::clip
