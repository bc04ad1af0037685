// Qwen's tokenizer (see qwen_tokenizer.h): tokenizer.json checked to be the pipeline this code is, and the
// encoding itself.
#include "models/qwen3/qwen_tokenizer.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/json_field.h"
#include "formats/json_text.h"
#include "models/clip/unicode_text.h"
#include "models/qwen3/qwen_pretokenize.h"

#include <algorithm>

namespace zest::qwen3 {
namespace {

namespace fs = std::filesystem;

// tokenizer.json is parsed by the one JSON reader (formats/json_text.h) into a nlohmann::json, whose
// objects are std::maps: the vocabulary has 151,643 entries, and ordered_json's objects are vectors whose
// every insert and lookup is a linear search. Its fields are read through JsonField like every other file's;
// a null is the tokenizers library's None (absent).

// A component's "type" ("" when it has none).
std::string type_of(const JsonField& component) { return component.at("type").string_or(""); }

void require_qwen_pipeline(const JsonField& root) {
  const JsonField normalizer = root.at("normalizer");
  if (normalizer.exists() && type_of(normalizer) != "NFC") normalizer.fail("must be {\"type\": \"NFC\"} (Qwen's) or null");
  const JsonField pre = root.at("pre_tokenizer");
  if (type_of(pre) != "Sequence") pre.fail("must be Qwen's Sequence of a Split and a ByteLevel pre-tokenizer");
  const JsonField list = pre.at("pretokenizers");
  const std::vector<JsonField> steps = list.items();
  if (steps.size() != 2 || type_of(steps[0]) != "Split" || type_of(steps[1]) != "ByteLevel")
    list.fail("must be [Split, ByteLevel] (Qwen's pre-tokenizer)");
  const JsonField& split = steps[0];
  const JsonField& byte_level = steps[1];
  const JsonField pattern = split.at("pattern").at("Regex");
  if (pattern.string() != kQwenSplitPattern) pattern.fail(str("must be Qwen's split rule ", kQwenSplitPattern));
  if (split.at("behavior").string() != "Isolated" || split.at("invert").boolean_or(false))
    split.fail("must split with behavior \"Isolated\", not inverted");
  if (byte_level.at("use_regex").boolean_or(false))
    byte_level.at("use_regex").fail("must be false (the Split before it is the split rule)");
  if (byte_level.at("add_prefix_space").boolean_or(false)) byte_level.at("add_prefix_space").fail("must be false (Qwen's)");
}

std::vector<std::pair<std::string, std::string>> read_merges(const JsonField& merges) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::vector<JsonField> list = merges.items();
  out.reserve(list.size());
  for (const JsonField& merge : list) {
    if (merge.is_string()) {  // "a b", as older tokenizers wrote them
      const std::string text = merge.string();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        merge.fail("must be two tokens separated by one space");
      out.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else {  // ["a", "b"], as tokenizers 0.20 on write them
      const std::vector<JsonField> pair = merge.is_array() ? merge.items() : std::vector<JsonField>();
      if (pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string())
        merge.expected("a pair of tokens or \"first second\"");
      out.emplace_back(pair[0].string(), pair[1].string());
    }
  }
  return out;
}

constexpr int64_t kMaxTokenId = (int64_t{1} << 31) - 1;

ByteLevelBpe read_bpe(const JsonField& model) {
  if (type_of(model) != "BPE") model.fail("must be a BPE model (Qwen's byte-level BPE)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!model.at(key).string_or("").empty())
      model.at(key).fail("must be null or empty (byte-level BPE marks no word boundaries)");
  }
  if (model.has("dropout")) model.at("dropout").fail("must be null");
  if (model.at("byte_fallback").boolean_or(false)) model.at("byte_fallback").fail("must be false");
  const JsonField vocab_field = model.at("vocab");
  if (!vocab_field.is_object()) vocab_field.expected("an object of token → id");
  std::unordered_map<std::string, int64_t> vocab;
  vocab.reserve(vocab_field.size());
  for (const auto& [token, id] : vocab_field.members()) vocab.emplace(token, id.integer(0, kMaxTokenId));
  return ByteLevelBpe(std::move(vocab), read_merges(model.at("merges")), model.at("ignore_merges").boolean_or(false),
                      model.file());
}

std::vector<AddedToken> read_added(const JsonField& root) {
  std::vector<AddedToken> added;
  if (!root.has("added_tokens")) return added;
  for (const JsonField& token : root.at("added_tokens").items()) {
    for (const char* key : {"lstrip", "rstrip", "single_word"}) {
      if (token.at(key).boolean_or(false))
        token.at(key).fail("is true; zest's Qwen tokenizer matches added tokens exactly (Qwen's are all false)");
    }
    AddedToken t;
    t.content = token.at("content").string();
    t.id = token.at("id").integer(0, kMaxTokenId);
    t.special = token.at("special").boolean_or(false);
    if (t.content.empty()) token.at("content").fail("must not be empty");
    added.push_back(std::move(t));
  }
  return added;
}

// tokenizer_config.json's pad_token: a string or {"content": ...}; null or absent: Qwen's <|endoftext|>.
std::string read_pad_token(const fs::path& folder) {
  const fs::path path = folder / "tokenizer_config.json";
  if (!fs::exists(path)) return "<|endoftext|>";
  const std::string file = path.string();
  const Json document = parse_ordered_json(read_text_file(file, "tokenizer configuration", 16 << 20), file);
  const JsonField pad = JsonField(document, file).null_as_absent().at("pad_token");
  if (!pad.exists()) return "<|endoftext|>";
  return pad.is_string() ? pad.string() : pad.at("content").string();
}

}  // namespace

QwenTokenizer::QwenTokenizer(ByteLevelBpe bpe, std::vector<AddedToken> added, std::string source)
    : bpe_(std::move(bpe)), added_(std::move(added)), added_by_byte_(256), source_(std::move(source)) {
  std::stable_sort(added_.begin(), added_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (size_t i = 0; i < added_.size(); ++i) added_by_byte_[static_cast<uint8_t>(added_[i].content[0])].push_back(i);
  for (const auto& [token, id] : bpe_.vocab()) size_ = std::max(size_, id + 1);
  for (const AddedToken& t : added_) size_ = std::max(size_, t.id + 1);
}

QwenTokenizer QwenTokenizer::from_folder(const fs::path& folder) {
  const fs::path path = folder / "tokenizer.json";
  ZEST_CHECK(fs::exists(path), printable(folder.string()), ": no tokenizer.json (a Qwen3 folder as the hub ships it "
             "holds tokenizer.json and tokenizer_config.json beside the weights)");
  const std::string file = path.string();
  const nlohmann::json document = parse_json(read_text_file(file, "Qwen tokenizer", 256 << 20), file);
  const JsonField root = JsonField(document, file).null_as_absent();
  if (!root.is_object()) root.expected("an object (a tokenizers library tokenizer.json)");
  require_qwen_pipeline(root);
  QwenTokenizer tokenizer(read_bpe(root.at("model")), read_added(root), file);
  const std::string pad = read_pad_token(folder);
  ZEST_CHECK(tokenizer.has_token(pad), printable((folder / "tokenizer_config.json").string()), ": pad_token '",
             printable(pad), "' is not a token of ", file);
  tokenizer.pad_id_ = tokenizer.token_id(pad);
  return tokenizer;
}

bool QwenTokenizer::has_token(const std::string& token) const {
  for (const AddedToken& t : added_)
    if (t.content == token) return true;
  return bpe_.vocab().count(token) > 0;
}

int64_t QwenTokenizer::token_id(const std::string& token) const {
  for (const AddedToken& t : added_)
    if (t.content == token) return t.id;
  const auto it = bpe_.vocab().find(token);
  ZEST_CHECK(it != bpe_.vocab().end(), source_, ": has no token '", printable(token), "'");
  return it->second;
}

void QwenTokenizer::encode_stretch(std::string_view text, size_t max_tokens, std::vector<int64_t>& ids) const {
  const std::u32string normal = clip::nfc(clip::utf8_decode(text));
  for (const std::u32string_view piece : qwen_pretokenize(normal)) {
    if (ids.size() >= max_tokens) return;
    bpe_.encode_piece(clip::utf8_encode(piece), ids);
  }
}

std::vector<int64_t> QwenTokenizer::encode(std::string_view text, size_t max_tokens) const {
  ZEST_CHECK(text.size() <= kMaxTokenizerTextBytes, "a text of ", text.size(), " bytes is longer than the ",
             kMaxTokenizerTextBytes, " the Qwen tokenizer takes");
  std::vector<int64_t> ids;
  size_t stretch = 0;  // start of the text not yet encoded
  for (size_t p = 0; p < text.size() && ids.size() < max_tokens;) {
    const AddedToken* found = nullptr;
    for (const size_t i : added_by_byte_[static_cast<uint8_t>(text[p])]) {
      if (text.compare(p, added_[i].content.size(), added_[i].content) == 0) {
        found = &added_[i];  // the longest: added_ is sorted longest first
        break;
      }
    }
    if (found == nullptr) {
      ++p;
      continue;
    }
    encode_stretch(text.substr(stretch, p - stretch), max_tokens, ids);
    if (ids.size() < max_tokens) ids.push_back(found->id);
    p += found->content.size();
    stretch = p;
  }
  if (ids.size() < max_tokens) encode_stretch(text.substr(stretch), max_tokens, ids);
  if (ids.size() > max_tokens) ids.resize(max_tokens);
  return ids;
}

}  // namespace zest::qwen3
