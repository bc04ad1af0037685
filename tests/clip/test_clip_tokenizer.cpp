// CLIPTokenizer: known ids of the real OpenAI vocabulary, padding and truncation as the pipelines call it,
// each cleaning mode's rules, bad tokenizer folders, tokenizer.json, and transformers' ids on the golden corpus.
#include "common/error_of.h"
#include "clip/clip_test_util.h"

#include "core/check.h"
#include "models/clip/clip_tokenizer.h"
#include "models/clip/unicode_text.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

namespace zest::clip::test {
namespace {

using zest::testing::error_of;

using Ids = std::vector<int64_t>;

const CLIPTokenizer& sd15(TextCleaning cleaning = TextCleaning::kTokenizersLibrary) {
  static const std::filesystem::path folder = make_tokenizer_folder("sd15", "<|endoftext|>");
  static const CLIPTokenizer tokenizers = CLIPTokenizer::from_folder(folder, TextCleaning::kTokenizersLibrary);
  static const CLIPTokenizer python = CLIPTokenizer::from_folder(folder, TextCleaning::kPythonWithoutFtfy);
  return cleaning == TextCleaning::kTokenizersLibrary ? tokenizers : python;
}

const CLIPTokenizer& sdxl2(TextCleaning cleaning = TextCleaning::kTokenizersLibrary) {
  static const std::filesystem::path folder = make_tokenizer_folder("sdxl2", "!");
  static const CLIPTokenizer tokenizers = CLIPTokenizer::from_folder(folder, TextCleaning::kTokenizersLibrary);
  static const CLIPTokenizer python = CLIPTokenizer::from_folder(folder, TextCleaning::kPythonWithoutFtfy);
  return cleaning == TextCleaning::kTokenizersLibrary ? tokenizers : python;
}

// Content ids only (without bos and eos).
Ids inner(const Ids& ids) { return Ids(ids.begin() + 1, ids.end() - 1); }

constexpr TextCleaning kBoth[] = {TextCleaning::kTokenizersLibrary, TextCleaning::kPythonWithoutFtfy};

TEST(CLIPTokenizer, ReadsTheReleasedVocabulary) {
  EXPECT_EQ(sd15().vocab_size(), 49408u);
  EXPECT_EQ(sd15().bos_id(), 49406);
  EXPECT_EQ(sd15().eos_id(), 49407);
  EXPECT_EQ(sd15().pad_id(), 49407);
  EXPECT_EQ(sdxl2().pad_id(), 0);  // "!"
  EXPECT_EQ(sd15().max_length(), 77);
}

TEST(CLIPTokenizer, KnownIds) {
  // The example of transformers' CLIP documentation, with the released openai/clip-vit-* vocabulary.
  for (const TextCleaning cleaning : kBoth) {
    EXPECT_EQ(sd15(cleaning).encode("a photo of a cat"), (Ids{49406, 320, 1125, 539, 320, 2368, 49407}));
    EXPECT_EQ(sd15(cleaning).tokenize("a photo of a cat"),
              (std::vector<std::string>{"a</w>", "photo</w>", "of</w>", "a</w>", "cat</w>"}));
  }
  EXPECT_EQ(sd15().encode(""), (Ids{49406, 49407}));
  EXPECT_EQ(sd15().tokenize("!"), (std::vector<std::string>{"!</w>"}));
  EXPECT_EQ(sd15().encode("!"), (Ids{49406, 256, 49407}));  // byte symbol "!" is 0, "!</w>" 256
}

TEST(CLIPTokenizer, PadsAsThePipelinesDo) {
  const Ids sd = sd15().encode_padded("a photo of a cat");
  ASSERT_EQ(sd.size(), 77u);
  EXPECT_EQ(Ids(sd.begin(), sd.begin() + 7), (Ids{49406, 320, 1125, 539, 320, 2368, 49407}));
  EXPECT_EQ(Ids(sd.begin() + 7, sd.end()), Ids(70, 49407));
  const Ids xl = sdxl2().encode_padded("a photo of a cat");
  EXPECT_EQ(Ids(xl.begin(), xl.begin() + 7), (Ids{49406, 320, 1125, 539, 320, 2368, 49407}));
  EXPECT_EQ(Ids(xl.begin() + 7, xl.end()), Ids(70, 0));
  EXPECT_EQ(sdxl2().encode_padded(""), [] {
    Ids ids(77, 0);
    ids[0] = 49406;
    ids[1] = 49407;
    return ids;
  }());
}

TEST(CLIPTokenizer, TruncatesToTheFirst75TokensAndTheEndToken) {
  std::string long_caption;
  for (int i = 0; i < 100; ++i) long_caption += "word" + std::to_string(i % 10) + " ";
  const Ids full = sd15().encode(long_caption);
  ASSERT_GT(full.size(), 77u);
  const Ids padded = sd15().encode_padded(long_caption);
  ASSERT_EQ(padded.size(), 77u);
  EXPECT_EQ(Ids(padded.begin(), padded.begin() + 76), Ids(full.begin(), full.begin() + 76));
  EXPECT_EQ(padded.back(), 49407);
}

TEST(CLIPTokenizer, LowerCasesAndComposes) {
  for (const TextCleaning cleaning : kBoth) {
    const CLIPTokenizer& t = sd15(cleaning);
    EXPECT_EQ(t.encode("A PHOTO OF A CAT"), t.encode("a photo of a cat"));
    EXPECT_EQ(t.encode("cafe\u0301"), t.encode("caf\u00e9"));  // NFC: e + combining acute = é
    EXPECT_EQ(t.encode("CAF\u00c9"), t.encode("caf\u00e9"));
    EXPECT_EQ(t.encode("  a \t photo\n\nof   a cat  "), t.encode("a photo of a cat"));
    EXPECT_EQ(t.encode(" \t\n "), t.encode(""));
    EXPECT_EQ(t.encode("ideographic\u3000space"), t.encode("ideographic space"));
    EXPECT_NE(t.encode("caf\u00e9"), t.encode("cafe"));
  }
}

TEST(CLIPTokenizer, SplitsContractionsNumbersAndPunctuation) {
  EXPECT_EQ(sd15().tokenize("it's"), (std::vector<std::string>{"it</w>", "'s</w>"}));
  EXPECT_EQ(sd15().tokenize("1920"), (std::vector<std::string>{"1</w>", "9</w>", "2</w>", "0</w>"}));
  EXPECT_EQ(sd15().tokenize("what?!"), (std::vector<std::string>{"what</w>", "?!</w>"}));
  EXPECT_EQ(sd15().tokenize("hello!world").size(), 3u);
}

TEST(CLIPTokenizer, SpecialTokensInTheText) {
  for (const TextCleaning cleaning : kBoth) {
    const CLIPTokenizer& t = sd15(cleaning);
    const Ids a = inner(t.encode("a")), b = inner(t.encode("b"));
    EXPECT_EQ(t.encode("a <|endoftext|> b"), (Ids{49406, a[0], 49407, b[0], 49407}));
    EXPECT_EQ(t.encode("<|startoftext|>"), (Ids{49406, 49406, 49407}));
  }
  // Upper case: transformers 4's Python tokenizer lower-cases, then keeps the special string whole; the
  // tokenizers library matches it in the lower-cased text only where its last declaration is normalized:
  // SD1.5's pad "<|endoftext|>" is a plain string (not normalized), SDXL's tokenizer_2 pads with "!", so its
  // "<|endoftext|>" stays the normalized end token (transformers 5.17, tests/data/clip/tokenizer_golden.json).
  EXPECT_EQ(sd15(TextCleaning::kPythonWithoutFtfy).encode("<|ENDOFTEXT|>"), (Ids{49406, 49407, 49407}));
  EXPECT_EQ(sd15().encode("<|ENDOFTEXT|>"), (Ids{49406, 27, 347, 40786, 4160, 91, 285, 49407}));
  EXPECT_EQ(sdxl2().encode("<|ENDOFTEXT|>"), (Ids{49406, 49407, 49407}));
  EXPECT_EQ(sd15().encode("<|STARTOFTEXT|>"), (Ids{49406, 49406, 49407})) << "bos is declared normalized";
}

TEST(CLIPTokenizer, SdxlSecondTokenizerTakesExclamationMarksAsItsPadToken) {
  // "!" is tokenizer_2's pad token, so transformers cuts it out of the text as a special token: id 0, not
  // the end-of-word form 256 that the first tokenizer gives.
  const Ids wow = inner(sd15().encode("wow"));
  ASSERT_EQ(wow.size(), 1u);
  EXPECT_EQ(sd15().encode("wow!"), (Ids{49406, wow[0], 256, 49407}));
  EXPECT_EQ(sdxl2().encode("wow!"), (Ids{49406, wow[0], 0, 49407}));
  EXPECT_EQ(sdxl2().encode("!!"), (Ids{49406, 0, 0, 49407}));
}

TEST(CLIPTokenizer, CleaningModesDifferWhereTheReferencesDo) {
  const CLIPTokenizer& lib = sd15(TextCleaning::kTokenizersLibrary);
  const CLIPTokenizer& py = sd15(TextCleaning::kPythonWithoutFtfy);
  // BasicTokenizer makes every CJK ideograph a word of its own; the tokenizers library keeps the run.
  const Ids cat = inner(py.encode("\u732b"));
  Ids two_cats = cat;
  two_cats.insert(two_cats.end(), cat.begin(), cat.end());
  EXPECT_EQ(inner(py.encode("\u732b\u732b")), two_cats);
  EXPECT_NE(inner(lib.encode("\u732b\u732b")), two_cats);
  // BasicTokenizer drops format and control characters (zero-width space, bell); the library keeps them.
  EXPECT_EQ(py.encode("zero\u200bwidth"), py.encode("zerowidth"));
  EXPECT_NE(lib.encode("zero\u200bwidth"), lib.encode("zerowidth"));
  EXPECT_EQ(py.encode("bell\x07" "char"), py.encode("bellchar"));
  // Vertical tab: white space to the library, a control character to BasicTokenizer.
  EXPECT_EQ(lib.encode("a\x0b" "b"), lib.encode("a b"));
  EXPECT_EQ(py.encode("a\x0b" "b"), py.encode("ab"));
}

TEST(CLIPTokenizer, BadFoldersAreOneClearMessage) {
  const std::filesystem::path good = make_tokenizer_folder("bad_base", "<|endoftext|>");
  auto copy_of_good = [&](const std::string& name) {
    const std::filesystem::path folder = fresh_folder(name);
    for (const char* file : {"vocab.json", "merges.txt", "tokenizer_config.json"}) {
      std::filesystem::copy_file(good / file, folder / file);
    }
    return folder;
  };
  auto load = [](const std::filesystem::path& folder) {
    return [folder] { CLIPTokenizer::from_folder(folder); };
  };

  const auto no_vocab = copy_of_good("no_vocab");
  std::filesystem::remove(no_vocab / "vocab.json");
  EXPECT_NE(error_of(load(no_vocab)).find("vocab.json: cannot be read"), std::string::npos);

  const auto bad_merge = copy_of_good("bad_merge");
  write_text(bad_merge / "merges.txt", "#version: 0.2\ni n\nt h e\n");
  EXPECT_NE(error_of(load(bad_merge)).find("merges.txt:3: expected a merge"), std::string::npos);

  const auto bad_json = copy_of_good("bad_json");
  write_text(bad_json / "tokenizer_config.json", "{\"pad_token\": ");
  EXPECT_NE(error_of(load(bad_json)).find("tokenizer_config.json: not valid JSON"), std::string::npos);

  const auto bad_pad = copy_of_good("bad_pad");
  write_text(bad_pad / "tokenizer_config.json", R"({"pad_token": "<pad>"})");
  EXPECT_NE(error_of(load(bad_pad)).find("has no token \"<pad>\""), std::string::npos);

  const auto bad_length = copy_of_good("bad_length");
  write_text(bad_length / "tokenizer_config.json", R"({"model_max_length": 1e30})");
  EXPECT_NE(error_of(load(bad_length)).find("field 'model_max_length' must be an integer in [2, 1000000]"),
            std::string::npos);

  const auto override_pad = copy_of_good("override_pad");
  write_text(override_pad / "special_tokens_map.json", R"({"pad_token": {"content": "!"}})");
  EXPECT_EQ(CLIPTokenizer::from_folder(override_pad).pad_id(), 0);

  EXPECT_NE(error_of(load(good / "missing")).find("not a folder"), std::string::npos);
}

// transformers 5's save_pretrained writes tokenizer.json alone: the same vocabulary and merges under
// "model" (merges as "a b" strings or [a, b] pairs) give the same ids; a broken one is one message.
TEST(CLIPTokenizer, ReadsTokenizerJsonWhereThereIsNoVocabJson) {
  const std::filesystem::path released = make_tokenizer_folder("json_base", "<|endoftext|>");
  const nlohmann::json vocab = nlohmann::json::parse(read_text(released / "vocab.json"));
  std::istringstream lines(read_text(released / "merges.txt"));
  nlohmann::json as_strings = nlohmann::json::array(), as_pairs = nlohmann::json::array();
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    as_strings.push_back(line);
    as_pairs.push_back({line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1)});
  }
  const std::string caption = "A photo of 2 cats, sitting on a mat!! <|endoftext|> ok";
  const std::vector<int64_t> want = CLIPTokenizer::from_folder(released).encode(caption);
  for (const auto& [name, merges] : {std::pair{"json_strings", as_strings}, std::pair{"json_pairs", as_pairs}}) {
    const std::filesystem::path folder = fresh_folder(name);
    std::filesystem::copy_file(released / "tokenizer_config.json", folder / "tokenizer_config.json");
    write_text(folder / "tokenizer.json",
               nlohmann::json{{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}}.dump());
    EXPECT_EQ(CLIPTokenizer::from_folder(folder).encode(caption), want) << name;
  }
  const std::filesystem::path bad = fresh_folder("json_bad");
  write_text(bad / "tokenizer.json", nlohmann::json{{"model", {{"type", "WordPiece"}}}}.dump());
  EXPECT_NE(error_of([&] { CLIPTokenizer::from_folder(bad); }).find("tokenizer.json: field 'model.type' must be \"BPE\", got a string (\"WordPiece\")"),
            std::string::npos);
  write_text(bad / "tokenizer.json", nlohmann::json{{"model", {{"type", 5}}}}.dump());
  EXPECT_NE(error_of([&] { CLIPTokenizer::from_folder(bad); }).find("tokenizer.json: field 'model.type' must be \"BPE\", got an integer (5)"),
            std::string::npos);
  write_text(bad / "tokenizer.json",
             nlohmann::json{{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"i n", 7}}}}}.dump());
  EXPECT_NE(error_of([&] { CLIPTokenizer::from_folder(bad); }).find("tokenizer.json: field 'model.merges[1]' must be a merge"), std::string::npos);
}

// transformers' ids on scripts/golden/make_clip_tokenizer_golden.py's corpus (ZEST_CLIP_TOKENIZER_GOLDEN
// points at another file of the same format).
TEST(CLIPTokenizer, EqualsTransformersOnTheGoldenCorpus) {
  const char* override_path = std::getenv("ZEST_CLIP_TOKENIZER_GOLDEN");
  const std::filesystem::path path = override_path ? override_path : data_path("clip/tokenizer_golden.json");
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path << " is absent: run scripts/golden/make_clip_tokenizer_golden.py where transformers is "
                 << "installed and commit its output there";
  }
  const nlohmann::json golden = nlohmann::json::parse(read_text(path));
  const auto& captions = golden.at("captions");
  ASSERT_GE(captions.size(), 500u);
  int compared = 0;
  for (const auto& [name, variant] : golden.at("variants").items()) {
    // Which of transformers' implementations made the ids decides the cleaning (docs/pipeline_modules.md).
    TextCleaning cleaning = TextCleaning::kTokenizersLibrary;
    if (variant.contains("cleaning")) {
      cleaning = variant["cleaning"] == "python" ? TextCleaning::kPythonWithoutFtfy : TextCleaning::kTokenizersLibrary;
    } else {
      const std::string cls = variant.at("class");
      const bool slow = cls.find("tokenization_clip.") != std::string::npos && cls.find("Fast") == std::string::npos &&
                        golden.at("versions").at("transformers").get<std::string>().rfind("4.", 0) == 0;
      if (slow && !golden.at("versions").at("ftfy").is_null()) {
        ADD_FAILURE() << name << ": made with ftfy installed, which zest does not reproduce";
        continue;
      }
      if (slow) cleaning = TextCleaning::kPythonWithoutFtfy;
    }
    const CLIPTokenizer& tokenizer = variant.at("pad_token") == "!" ? sdxl2(cleaning) : sd15(cleaning);
    const auto& ids = variant.at("ids");
    ASSERT_EQ(ids.size(), captions.size());
    int mismatches = 0;
    for (size_t i = 0; i < captions.size(); ++i) {
      const std::string caption = captions[i];
      const Ids expected = ids[i].get<Ids>();
      const Ids got = tokenizer.encode(caption);
      if (got != expected && ++mismatches <= 10) {
        ADD_FAILURE() << name << " caption " << i << " " << nlohmann::json(caption).dump() << ": expected "
                      << nlohmann::json(expected).dump() << ", got " << nlohmann::json(got).dump();
      }
    }
    EXPECT_EQ(mismatches, 0) << name;
    if (variant.contains("padding_mismatches")) {
      EXPECT_TRUE(variant["padding_mismatches"].empty()) << name;
    }
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

}  // namespace
}  // namespace zest::clip::test
