// The one JSON reader (formats/json_text.h) and the bounded text read under it (core/untrusted_file.h):
// the depth limit exactly (the limit is read, one more level is refused), the size cap exactly (the cap
// is read, one byte more is refused), numbers too large to represent refused by key, short escaped
// excerpts of hostile values, and the terminal-safe escaping of what error messages quote.
#include "inputs/inputs_test_util.h"

#include "core/untrusted_file.h"
#include "formats/json_field.h"
#include "formats/json_text.h"
#include "train/error_report.h"

#include <nlohmann/json.hpp>

#include <chrono>

namespace zest::testing {
namespace {

std::string nested_arrays(int levels) { return std::string(static_cast<size_t>(levels), '[') + std::string(static_cast<size_t>(levels), ']'); }

TEST(JsonReader, DepthLimitIsExact) {
  // kMaxJsonDepth levels are a valid document; one more is refused before it is built.
  EXPECT_EQ(parse_json(nested_arrays(kMaxJsonDepth), "ok.json").size(), 1u);
  EXPECT_EQ(parse_ordered_json(nested_arrays(kMaxJsonDepth), "ok.json").size(), 1u);
  expect_zest_error([] { parse_json(nested_arrays(kMaxJsonDepth + 1), "deep.json"); },
                    {"deep.json: JSON nested deeper than 64 levels"});
  expect_zest_error([] { parse_ordered_json("{\"a\": " + nested_arrays(kMaxJsonDepth) + "}", "obj.json"); },
                    {"obj.json: JSON nested deeper than 64 levels"});
  // A caller's own limit, exactly too.
  EXPECT_NO_THROW(parse_json(nested_arrays(3), "three.json", 3));
  expect_zest_error([] { parse_json(nested_arrays(4), "four.json", 3); }, {"nested deeper than 3 levels"});
}

TEST(JsonReader, NumbersTooLargeAreRefusedByKey) {
  const std::string message = zest_error_of([] { parse_json(R"({"a": 1, "num_hidden_layers": 1e309})", "c.json"); });
  EXPECT_NE(message.find("c.json: field 'num_hidden_layers': a number too large to represent"), std::string::npos)
      << message;
  EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
  // Past uint64 an integer is read as a float; refused later by the key's range check, not by the parser.
  EXPECT_TRUE(parse_json(R"({"x": 99999999999999999999999})", "c.json")["x"].is_number_float());
}

TEST(JsonReader, ExcerptsAreShortEscapedAndCheap) {
  const nlohmann::json huge_string = std::string(50'000'000, 'x');
  const auto start = std::chrono::steady_clock::now();
  const std::string excerpt = json_excerpt(huge_string, 60);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  EXPECT_LE(excerpt.size(), 63u);
  EXPECT_EQ(excerpt.substr(0, 4), "\"xxx");
  EXPECT_EQ(excerpt.substr(excerpt.size() - 3), "...");
  // A control character inside a value is shown escaped, never raw.
  EXPECT_EQ(json_excerpt(nlohmann::json("\x1b]0;title\x07")).find('\x1b'), std::string::npos);
  // A deep or wide value costs only the excerpt.
  nlohmann::json wide = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) wide.push_back(i);
  EXPECT_LE(json_excerpt(wide, 40).size(), 43u);
  EXPECT_EQ(json_excerpt(nlohmann::ordered_json::parse(R"({"a": [1, 2]})")), "{\"a\": [1, 2]}");
}

TEST(JsonReader, ReadJsonFileChecksKindAndSize) {
  const TempDir dir("json_reader");
  write_text(dir.sub("ok.json"), R"({"a": 1})");
  EXPECT_EQ(read_json_file(dir.sub("ok.json"), "test config")["a"], 1);
  ::mkfifo(dir.sub("fifo.json").c_str(), 0644);
  expect_zest_error([&] { read_json_file(dir.sub("fifo.json"), "test config"); }, {"fifo.json", "FIFO"});
  std::filesystem::create_symlink("/dev/zero", dir.sub("zero.json"));
  expect_zest_error([&] { read_json_file(dir.sub("zero.json"), "test config"); }, {"zero.json", "character device"});
  write_text(dir.sub("big.json"), "[" + std::string(200, ' ') + "]");
  expect_zest_error([&] { read_json_file(dir.sub("big.json"), "test config", 100); },
                    {"big.json", "202 bytes, more than the 100"});
  expect_zest_error([&] { read_json_file(dir.sub("missing.json"), "test config"); }, {"missing.json", "no such file"});
}

TEST(JsonReader, ReadTextFileLimitIsExact) {
  const TempDir dir("text_limit");
  write_text(dir.sub("at_limit"), std::string(100, 'a'));
  write_text(dir.sub("over_limit"), std::string(101, 'a'));
  EXPECT_EQ(read_text_file(dir.sub("at_limit"), "test file", 100).size(), 100u);
  expect_zest_error([&] { read_text_file(dir.sub("over_limit"), "test file", 100); },
                    {"over_limit", "101 bytes, more than the 100 a test file may have"});
  // A sparse file of 2 GB is refused from its size, at once and without reading it.
  const std::string sparse = dir.sub("sparse");
  write_text(sparse, "");
  ASSERT_EQ(::truncate(sparse.c_str(), int64_t{2} << 30), 0);
  const auto start = std::chrono::steady_clock::now();
  expect_zest_error([&] { read_text_file(sparse, "test file"); }, {"sparse", "2147483648 bytes"});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
}

TEST(JsonReader, TypedFieldsNameTheFileAndKey) {
  const nlohmann::ordered_json doc = parse_ordered_json(R"({"n": "12", "big": 1e300, "deep": {"x": -1}})", "f.json");
  const JsonField root(doc, "f.json");
  expect_zest_error([&] { root.at("n").integer(1, 10); }, {"f.json: field 'n' must be an integer in [1, 10], got a string"});
  expect_zest_error([&] { root.at("big").integer(); }, {"field 'big' must be an integer"});
  expect_zest_error([&] { root.at("deep").at("x").integer(0); }, {"field 'deep.x' must be an integer >= 0"});
  expect_zest_error([&] { root.at("missing").string(); }, {"field 'missing' is missing (expected a string)"});
}

TEST(JsonReader, ErrorMessagesReachTheTerminalWithoutControlCharacters) {
  // Whatever a message quotes (a tensor name, the first line of `latest`), no escape sequence reaches
  // the terminal: zest's error reporter escapes C0 and C1 controls, keeping newlines and printable UTF-8.
  const std::string shown = describe_error(Error("tensor '\x1b[2J\x1b]0;owned\x07' and \xc2\x9b" "31m, caf\xc3\xa9"));
  EXPECT_EQ(shown.find('\x1b'), std::string::npos) << shown;
  EXPECT_EQ(shown.find('\x07'), std::string::npos) << shown;
  EXPECT_EQ(shown.find("\xc2\x9b"), std::string::npos) << shown;
  EXPECT_NE(shown.find("\\x1b[2J"), std::string::npos) << shown;
  EXPECT_NE(shown.find("caf\xc3\xa9"), std::string::npos) << shown;
}

}  // namespace
}  // namespace zest::testing
