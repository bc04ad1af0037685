// Helpers for the CLIP tests: a tokenizer folder built from the real OpenAI merges in tests/data/clip
// (vocab.json derived from them as the released CLIP tokenizers have it) and JSON reading.
#pragma once

#include "models/clip/unicode_text.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace zest::clip::test {

inline std::string data_path(const std::string& name) { return std::string(ZEST_TEST_DATA) + "/" + name; }

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A fresh empty folder under the test temporary directory.
inline std::filesystem::path fresh_folder(const std::string& name) {
  const std::filesystem::path folder = std::filesystem::path(::testing::TempDir()) / ("zest_clip_" + name);
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  return folder;
}

// The CLIP vocabulary: the 256 byte symbols, the same with "</w>", one token per merge, then the two
// special tokens (ids 49406 and 49407 with the full merges).
inline nlohmann::json vocab_from_merges(const std::string& merges_text) {
  std::vector<std::string> symbols;
  auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  for (int b = 0; b < 256; ++b) {
    if (printable(b)) symbols.push_back(utf8_encode(std::u32string(1, static_cast<char32_t>(b))));
  }
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    if (!printable(b)) symbols.push_back(utf8_encode(std::u32string(1, next++)));
  }
  nlohmann::json vocab = nlohmann::json::object();  // ordered_json would look each key up linearly
  int64_t id = 0;
  for (const std::string& s : symbols) vocab[s] = id++;
  for (const std::string& s : symbols) vocab[s + "</w>"] = id++;
  std::istringstream lines(merges_text);
  std::string line;
  std::getline(lines, line);  // #version
  while (std::getline(lines, line)) {
    const size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    vocab[line.substr(0, space) + line.substr(space + 1)] = id++;
  }
  vocab["<|startoftext|>"] = id++;
  vocab["<|endoftext|>"] = id++;
  return vocab;
}

// A tokenizer/ folder like a released pipeline's: SD1.5's pads with <|endoftext|>, SDXL's tokenizer_2 with "!".
inline std::filesystem::path make_tokenizer_folder(const std::string& name, const std::string& pad_token) {
  const std::filesystem::path folder = fresh_folder(name);
  const std::string merges = read_text(data_path("clip/merges.txt"));
  write_text(folder / "merges.txt", merges);
  write_text(folder / "vocab.json", vocab_from_merges(merges).dump());
  nlohmann::json config = {{"bos_token", {{"content", "<|startoftext|>"}, {"normalized", true}}},
                           {"eos_token", {{"content", "<|endoftext|>"}, {"normalized", true}}},
                           {"unk_token", {{"content", "<|endoftext|>"}, {"normalized", true}}},
                           {"pad_token", pad_token},
                           {"do_lower_case", true},
                           {"model_max_length", 77},
                           {"tokenizer_class", "CLIPTokenizer"}};
  write_text(folder / "tokenizer_config.json", config.dump(2));
  return folder;
}

}  // namespace zest::clip::test
