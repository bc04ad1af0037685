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

using JsonValue = nlohmann::json;  // std::map objects: the vocabulary has 151,643 entries (ordered_json's lookups are linear)

// One field of tokenizer.json, for messages: the file and the field's path.
struct Field {
  const JsonValue& value;
  std::string file, path;

  [[noreturn]] void fail(const std::string& what) const {
    if (path.empty()) ZEST_FAIL(file, ": ", what);
    ZEST_FAIL(file, ": field '", path, "' ", what);
  }
  bool has(const char* key) const { return value.is_object() && value.contains(key) && !value[key].is_null(); }
  Field at(const char* key) const {
    if (!has(key)) fail(str("has no \"", key, "\""));
    return {value[key], file, path.empty() ? std::string(key) : path + "." + key};
  }
  std::string string() const {
    if (!value.is_string()) fail("must be a string");
    return value.get<std::string>();
  }
  bool boolean() const {
    if (!value.is_boolean()) fail("must be true or false");
    return value.get<bool>();
  }
  bool flag(const char* key) const { return has(key) && at(key).boolean(); }
  std::string type() const { return has("type") ? at("type").string() : std::string(); }
  const JsonValue& array() const {
    if (!value.is_array()) fail("must be a list");
    return value;
  }
};

void require_qwen_pipeline(const Field& root) {
  if (root.has("normalizer") && root.at("normalizer").type() != "NFC")
    root.at("normalizer").fail("must be {\"type\": \"NFC\"} (Qwen's) or null");
  const Field pre = root.at("pre_tokenizer");
  if (pre.type() != "Sequence") pre.fail("must be Qwen's Sequence of a Split and a ByteLevel pre-tokenizer");
  const Field list = pre.at("pretokenizers");
  const JsonValue& steps = list.array();
  const Field split{steps.size() == 2 ? steps[0] : steps, list.file, list.path + "[0]"};
  const Field byte_level{steps.size() == 2 ? steps[1] : steps, list.file, list.path + "[1]"};
  if (steps.size() != 2 || split.type() != "Split" || byte_level.type() != "ByteLevel")
    list.fail("must be [Split, ByteLevel] (Qwen's pre-tokenizer)");
  const Field pattern = split.at("pattern").at("Regex");
  if (pattern.string() != kQwenSplitPattern) pattern.fail(str("must be Qwen's split rule ", kQwenSplitPattern));
  if (split.at("behavior").string() != "Isolated" || split.flag("invert"))
    split.fail("must split with behavior \"Isolated\", not inverted");
  if (byte_level.flag("use_regex")) byte_level.at("use_regex").fail("must be false (the Split before it is the split rule)");
  if (byte_level.flag("add_prefix_space")) byte_level.at("add_prefix_space").fail("must be false (Qwen's)");
}

std::vector<std::pair<std::string, std::string>> read_merges(const Field& merges) {
  std::vector<std::pair<std::string, std::string>> out;
  const JsonValue& list = merges.array();
  out.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const Field merge{list[i], merges.file, str(merges.path, "[", i, "]")};
    if (list[i].is_string()) {  // "a b", as older tokenizers wrote them
      const std::string text = merge.string();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        merge.fail("must be two tokens separated by one space");
      out.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else {  // ["a", "b"], as tokenizers 0.20 on write them
      if (!list[i].is_array() || list[i].size() != 2 || !list[i][0].is_string() || !list[i][1].is_string())
        merge.fail("must be a pair of tokens");
      out.emplace_back(list[i][0].get<std::string>(), list[i][1].get<std::string>());
    }
  }
  return out;
}

ByteLevelBpe read_bpe(const Field& model) {
  if (model.type() != "BPE") model.fail("must be a BPE model (Qwen's byte-level BPE)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.has(key) && !model.at(key).string().empty())
      model.at(key).fail("must be null or empty (byte-level BPE marks no word boundaries)");
  }
  if (model.has("dropout")) model.at("dropout").fail("must be null");
  if (model.flag("byte_fallback")) model.at("byte_fallback").fail("must be false");
  const Field vocab_field = model.at("vocab");
  if (!vocab_field.value.is_object()) vocab_field.fail("must be an object of token → id");
  std::unordered_map<std::string, int64_t> vocab;
  vocab.reserve(vocab_field.value.size());
  for (const auto& [token, id] : vocab_field.value.items()) {
    if (!id.is_number_integer()) vocab_field.fail(str("[\"", printable(token, 40), "\"] is not an integer id"));
    vocab.emplace(token, id.get<int64_t>());
  }
  return ByteLevelBpe(std::move(vocab), read_merges(model.at("merges")), model.flag("ignore_merges"), model.file);
}

std::vector<AddedToken> read_added(const Field& root) {
  std::vector<AddedToken> added;
  if (!root.has("added_tokens")) return added;
  const Field list = root.at("added_tokens");
  for (size_t i = 0; i < list.array().size(); ++i) {
    const Field token{list.value[i], list.file, str(list.path, "[", i, "]")};
    for (const char* key : {"lstrip", "rstrip", "single_word"}) {
      if (token.flag(key)) token.at(key).fail("is true; zest's Qwen tokenizer matches added tokens exactly (Qwen's are all false)");
    }
    AddedToken t;
    t.content = token.at("content").string();
    const JsonValue& id = token.at("id").value;
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 31))
      token.at("id").fail("must be an integer id in 0 .. 2^31");
    t.id = id.get<int64_t>();
    t.special = token.flag("special");
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
  const JsonField config(document, file);
  if (!config.has("pad_token") || config.at("pad_token").json().is_null()) return "<|endoftext|>";
  const JsonField pad = config.at("pad_token");
  return pad.json().is_string() ? pad.string() : pad.at("content").string();
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
  const JsonValue document = parse_json(read_text_file(file, "Qwen tokenizer", 256 << 20), file);
  const Field root{document, file, ""};
  if (!document.is_object()) ZEST_FAIL(file, ": ","must be a JSON object (a tokenizers library tokenizer.json)");
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
