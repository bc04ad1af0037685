// Qwen's tokenizer pieces on their own (models/qwen3): the split rule's regex semantics, byte-level BPE in merge
// order, added tokens cut from the raw text, truncation, the bounded input and refusals of other tokenizers.
// Equality with transformers on hard texts is in test_hy_text_golden.cpp.
#include "tiny_text_encoders.h"

#include "core/check.h"
#include "models/hy_text/motion_prompt.h"
#include "models/qwen3/qwen_pretokenize.h"
#include "models/qwen3/qwen_tokenizer.h"
#include "models/clip/unicode_text.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

namespace zest::hytext::test {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> pieces(const std::string& text) {
  const std::u32string code_points = clip::utf8_decode(text);
  std::vector<std::string> out;
  for (const auto piece : qwen3::qwen_pretokenize(code_points)) out.push_back(clip::utf8_encode(piece));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(QwenPretokenize, FollowsTheSplitRegex) {
  EXPECT_EQ(pieces("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces("I'm don't THEY'RE 'sa"), (Pieces{"I", "'m", " don", "'t", " THEY", "'RE", " '", "sa"}));
  // \s+(?!\S) leaves the last space of a run to the word after it; a run at the end is kept whole.
  EXPECT_EQ(pieces("a   b  "), (Pieces{"a", "  ", " b", "  "}));
  // \s*[\r\n]+ ends at the run's last line break.
  EXPECT_EQ(pieces("x\n \n  y"), (Pieces{"x", "\n \n", " ", " y"}));
  // Numbers one digit at a time; punctuation with one leading space and trailing line breaks.
  EXPECT_EQ(pieces("12 3.5"), (Pieces{"1", "2", " ", "3", ".", "5"}));
  EXPECT_EQ(pieces("hi!!\n\nok ?!"), (Pieces{"hi", "!!\n\n", "ok", " ?!"}));
  // A non-letter, non-digit character (not a line break) joins the letters after it.
  EXPECT_EQ(pieces("\"quoted\" 一个人 🏃x"), (Pieces{"\"quoted", "\"", " 一个人", " 🏃", "x"}));
  EXPECT_EQ(pieces("\nA"), (Pieces{"\n", "A"}));
  EXPECT_EQ(pieces(""), Pieces{});
  EXPECT_EQ(pieces("\xe3\x80\x80\xe3\x80\x80z"), (Pieces{"\xe3\x80\x80", "\xe3\x80\x80z"}));  // U+3000 is white space
}

qwen3::QwenTokenizer tiny_tokenizer(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("zest_qwen_tok_" + name);
  fs::remove_all(dir);
  write_tiny_qwen(dir, 16, 1);
  return qwen3::QwenTokenizer::from_folder(dir);
}

int64_t id_of(const qwen3::QwenTokenizer& t, const std::string& token) { return t.token_id(token); }

TEST(QwenTokenizer, MergesInRankOrderAndCutsAddedTokens) {
  const auto t = tiny_tokenizer("merges");
  EXPECT_EQ(t.encode(" walk and the"), (std::vector<int64_t>{id_of(t, "Ġwalk"), id_of(t, "Ġand"), id_of(t, "Ġthe")}));
  // "Ġ Ġ" is a merge, so two spaces before a word are one token, then the space joins the word.
  EXPECT_EQ(t.encode("a   walk"), (std::vector<int64_t>{id_of(t, "a"), id_of(t, "ĠĠ"), id_of(t, "Ġwalk")}));
  EXPECT_EQ(t.encode("<|im_start|>user\n\n<|im_end|>"),
            (std::vector<int64_t>{id_of(t, "<|im_start|>"), id_of(t, "u"), id_of(t, "s"), id_of(t, "er"), id_of(t, "ĊĊ"),
                                  id_of(t, "<|im_end|>")}));
  // Text that is almost an added token is text: "<|", "im", "_end", byte by byte (no merge applies).
  const std::vector<int64_t> almost = t.encode("<|im_end");
  EXPECT_EQ(almost.size(), 8u);
  EXPECT_EQ(std::count(almost.begin(), almost.end(), id_of(t, "<|im_end|>")), 0);
  EXPECT_EQ(t.pad_id(), id_of(t, "<|endoftext|>"));
}

TEST(QwenTokenizer, TruncationGivesTheFirstIdsOfTheWhole) {
  const auto t = tiny_tokenizer("truncation");
  const std::string text = motion_chat_text("a person walks forward, turns and waves 3 times");
  const std::vector<int64_t> whole = t.encode(text);
  for (const size_t n : {size_t{0}, size_t{1}, size_t{5}, whole.size() / 2, whole.size() - 1, whole.size(), whole.size() + 10}) {
    const std::vector<int64_t> cut = t.encode(text, n);
    EXPECT_EQ(cut, std::vector<int64_t>(whole.begin(), whole.begin() + static_cast<int64_t>(std::min(n, whole.size()))));
  }
}

TEST(QwenTokenizer, LongInputIsBoundedAndLinearish) {
  const auto t = tiny_tokenizer("long");
  // One piece of 200,000 letters: the priority-queue BPE merges it in well under a second.
  const std::string letters(200'000, 'a');
  EXPECT_EQ(t.encode(letters).size(), letters.size());  // no merge joins a with a
  EXPECT_THROW(t.encode(std::string(qwen3::kMaxTokenizerTextBytes + 1, 'x')), Error);
}

TEST(QwenTokenizer, AnotherKindOfTokenizerIsRefusedNamingTheField) {
  const fs::path dir = fs::path(::testing::TempDir()) / "zest_qwen_tok_bad";
  fs::remove_all(dir);
  write_tiny_qwen(dir, 16, 1);
  auto expect_refused = [&](const std::function<void(nlohmann::json&)>& change, const std::string& part) {
    nlohmann::json tokenizer = tiny_qwen_tokenizer_json();
    change(tokenizer);
    write_json(dir / "tokenizer.json", tokenizer);
    try {
      qwen3::QwenTokenizer::from_folder(dir);
      ADD_FAILURE() << "accepted: " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
    }
  };
  expect_refused([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+"; },
                 "field 'pre_tokenizer.pretokenizers[0].pattern.Regex' must be Qwen's split rule");
  expect_refused([](auto& j) { j["model"]["type"] = "WordPiece"; }, "field 'model' must be a BPE model");
  expect_refused([](auto& j) { j["normalizer"] = {{"type", "NFKC"}}; }, "field 'normalizer' must be");
  expect_refused([](auto& j) { j["added_tokens"][0]["lstrip"] = true; }, "added_tokens[0].lstrip' is true");
  expect_refused([](auto& j) { j["model"]["merges"][0] = {"Ġ", "nope"}; }, "merge 0");
  fs::remove(dir / "tokenizer.json");
  EXPECT_THROW(qwen3::QwenTokenizer::from_folder(dir), Error);
}

}  // namespace
}  // namespace zest::hytext::test
