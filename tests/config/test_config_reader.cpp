// ConfigTable: typed reads, locations in errors, unknown keys with suggestions, --set overrides, paths,
// and the ConfigWriter's TOML literals.
#include "tests/config/config_test_util.h"

#include "core/config_reader.h"
#include "core/config_writer.h"

#include <gtest/gtest.h>

#include <cmath>

namespace zest {
namespace {

using test::expect_error;

TEST(ConfigReader, TypedReadsAndDefaults) {
  ConfigTable root = ConfigTable::parse_string(R"(
[t]
flag = true
count = 3
big = 5000000000
ratio = 0.5
whole = 2
name = "x"
ints = [1, 2]
floats = [1, 2.5]
words = ["a", "b"]
)",
                                               "cfg.toml");
  ConfigTable t = root.table("t");
  EXPECT_TRUE(t.get("flag", false));
  EXPECT_EQ(t.get("count", 0), 3);
  EXPECT_EQ(t.get<int64_t>("big", 0), 5'000'000'000);
  EXPECT_DOUBLE_EQ(t.get("ratio", 0.0), 0.5);
  EXPECT_DOUBLE_EQ(t.get("whole", 0.0), 2.0);  // an integer literal is fine for a number
  EXPECT_EQ(t.get<std::string>("name", ""), "x");
  EXPECT_EQ(t.get("ints", std::vector<int64_t>{}), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(t.get("floats", std::vector<double>{}), (std::vector<double>{1.0, 2.5}));
  EXPECT_EQ(t.get("words", std::vector<std::string>{}), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(t.get("absent", 7), 7);
  EXPECT_FALSE(t.get_optional<int>("absent2").has_value());
  EXPECT_EQ(t.keys(), (std::vector<std::string>{"flag", "count", "big", "ratio", "whole", "name", "ints",
                                                "floats", "words"}));
  EXPECT_EQ(t.dotted("count"), "t.count");
  t.reject_unknown_keys();  // everything was read
}

TEST(ConfigReader, WrongTypeNamesFileLineColumnKeyAndExpectedType) {
  ConfigTable root = ConfigTable::parse_string("[engine]\nstage = \"two\"\nratio = true\nl = [1, \"x\"]\n", "cfg.toml");
  ConfigTable engine = root.table("engine");
  expect_error([&] { engine.get("stage", 2); },
               {"cfg.toml:2:9: engine.stage: expected an integer, got a string (\"two\")"});
  expect_error([&] { engine.get("ratio", 1.0); }, {"cfg.toml:3:9: engine.ratio: expected a number, got a boolean"});
  expect_error([&] { engine.get("l", std::vector<int64_t>{}); },
               {"cfg.toml:4:9: engine.l[1]: expected an integer, got a string (\"x\")"});
  expect_error([&] { engine.get("stage", std::vector<std::string>{}); }, {"expected an array of strings"});
}

TEST(ConfigReader, IntegerRangeAndFloatForInteger) {
  ConfigTable root = ConfigTable::parse_string("n = 10000000000\nf = 2.5\n", "cfg.toml");
  expect_error([&] { root.get("n", 0); }, {"cfg.toml:1:5: n: value 10000000000 is out of range"});
  expect_error([&] { root.get("f", 0); }, {"f: expected an integer, got a float (2.5)"});
}

TEST(ConfigReader, SyntaxErrorNamesFileLineAndColumn) {
  expect_error([] { ConfigTable::parse_string("[engine]\nstage = = 1\n", "run.toml"); },
               {"run.toml:2:", "TOML syntax error"});
  expect_error([] { ConfigTable::parse_string("a = 1\na = 2\n", "run.toml"); }, {"run.toml:2:", "TOML syntax error"});
  expect_error([] { ConfigTable::parse_file("/nonexistent/zest_run.toml"); },
               {"/nonexistent/zest_run.toml: cannot read config file"});
}

TEST(ConfigReader, UnknownKeysSuggestTheClosestKnownKey) {
  ConfigTable root = ConfigTable::parse_string("[engine]\nstage = 1\nbuckt_mb = 3\n", "cfg.toml");
  ConfigTable engine = root.table("engine");
  engine.get("stage", 0);
  engine.get("bucket_mb", 0.0);
  engine.mark_known("precision");
  expect_error([&] { engine.reject_unknown_keys(); },
               {"cfg.toml:3:1: engine.buckt_mb: unknown key (did you mean 'bucket_mb'?)"});
  expect_error([&] { engine.reject_unknown_keys({{"buckt_mb", "custom advice"}}); }, {"unknown key (custom advice)"});
}

TEST(ConfigReader, UnknownKeyWithoutCloseMatchListsKnownKeys) {
  ConfigTable root = ConfigTable::parse_string("zzz = 1\n[model]\n", "cfg.toml");
  root.table("model");
  root.table("data");
  expect_error([&] { root.reject_unknown_keys(); }, {"zzz: unknown key; known sections: data, model"});
}

TEST(ConfigReader, UnknownSectionSuggestsSection) {
  ConfigTable root = ConfigTable::parse_string("[optimiser]\nlr = 1\n", "cfg.toml");
  root.table("optimizer");
  expect_error([&] { root.reject_unknown_keys(); },
               {"cfg.toml:1:1: [optimiser]: unknown section (did you mean [optimizer]?)"});
}

TEST(ConfigReader, ChoiceListsAllowedValues) {
  ConfigTable root = ConfigTable::parse_string("p = \"fp8\"\nq = \"bf61\"\n", "cfg.toml");
  expect_error([&] { root.get_choice("p", "bf16", {"fp32", "bf16", "fp16"}); },
               {"cfg.toml:1:5: p: \"fp8\" is not one of \"fp32\", \"bf16\", \"fp16\""});
  expect_error([&] { root.get_choice("q", "bf16", {"fp32", "bf16", "fp16"}); }, {"(did you mean \"bf16\"?)"});
  EXPECT_EQ(root.get_choice("absent", "fp32", {"fp32", "bf16"}), "fp32");
}

TEST(ConfigReader, RequiredAndTableErrors) {
  ConfigTable root = ConfigTable::parse_string("engine = 3\n[data]\nx = 1\n", "cfg.toml");
  expect_error([&] { root.table("engine"); }, {"cfg.toml:1:10: engine: expected a table ([engine]), got an integer"});
  ConfigTable data = root.table("data");
  expect_error([&] { data.required<std::string>("dir"); },
               {"cfg.toml:2:1: data.dir: required key is missing (expected a string)"});
  ConfigTable absent = root.table("train");  // absent → empty, same dotted path
  EXPECT_TRUE(absent.keys().empty());
  expect_error([&] { absent.fail("max_steps", "bad"); }, {"cfg.toml: train.max_steps: bad"});
}

TEST(ConfigReader, OverridesLayerOverTheFileAndNameTheSetArgument) {
  ConfigTable root = ConfigTable::parse_string("[engine]\nstage = 2\nprecision = \"bf16\"\n", "cfg.toml");
  root.apply_overrides({"engine.stage=1", "engine.precision=fp16", "optimizer.betas = [0.9, 0.95]",
                        "engine.loss_scale.window=7", "data.dir=/tmp/x"});
  ConfigTable engine = root.table("engine");
  EXPECT_EQ(engine.get("stage", 0), 1);
  EXPECT_EQ(engine.get<std::string>("precision", ""), "fp16");  // a bare word is a string
  EXPECT_EQ(engine.table("loss_scale").get("window", 0), 7);
  EXPECT_EQ(root.table("optimizer").get("betas", std::vector<double>{}), (std::vector<double>{0.9, 0.95}));
  EXPECT_EQ(root.table("data").get<std::string>("dir", ""), "/tmp/x");

  ConfigTable bad = ConfigTable::parse_string("", "cfg.toml");
  bad.apply_overrides({"engine.stage=\"two\""});
  ConfigTable bad_engine = bad.table("engine");
  expect_error([&] { bad_engine.get("stage", 0); },
               {"--set engine.stage=\"two\": engine.stage: expected an integer, got a string"});
}

TEST(ConfigReader, MalformedOverrides) {
  const auto apply = [](const std::string& assignment) {
    ConfigTable root = ConfigTable::parse_string("", "cfg.toml");
    root.apply_overrides({assignment});
  };
  expect_error([&] { apply("engine.stage"); }, {"--set engine.stage: expected section.key=value"});
  expect_error([&] { apply("=3"); }, {"expected section.key=value"});
  expect_error([&] { apply("engine..stage=3"); }, {"expected section.key=value"});
  expect_error([&] { apply("optimizer.betas=[0.9,"); }, {"--set optimizer.betas=[0.9,: '[0.9,' is not a TOML value"});
}

TEST(ConfigReader, PathsResolveAgainstTheDefiningFile) {
  ConfigTable root = ConfigTable::parse_string("a = \"models/m.toml\"\nb = \"/abs/m.toml\"\nc = \"../x.toml\"\n",
                                               "/runs/cfg/run.toml");
  EXPECT_EQ(root.get_path("a", ""), "/runs/cfg/models/m.toml");
  EXPECT_EQ(root.get_path("b", ""), "/abs/m.toml");
  EXPECT_EQ(root.get_path("c", ""), "/runs/x.toml");
  EXPECT_EQ(root.get_path("absent", "dflt"), "dflt");
  ConfigTable overridden = ConfigTable::parse_string("", "/runs/cfg/run.toml");
  overridden.apply_overrides({"a=rel/m.toml"});
  EXPECT_EQ(overridden.get_path("a", ""), "rel/m.toml");  // --set: relative to the working directory
}

TEST(ConfigReader, EditDistanceAndClosestMatch) {
  EXPECT_EQ(edit_distance("stage", "stage"), 0u);
  EXPECT_EQ(edit_distance("stgae", "stage"), 2u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  const std::vector<std::string> keys = {"stage", "precision", "bucket_mb", "warmup_steps"};
  EXPECT_EQ(closest_match("stgae", keys), "stage");
  EXPECT_EQ(closest_match("precison", keys), "precision");
  EXPECT_EQ(closest_match("bucket", keys), "bucket_mb");
  EXPECT_EQ(closest_match("warmup", keys), "warmup_steps");
  EXPECT_EQ(closest_match("lr", keys), "");
}

TEST(ConfigWriter, RendersTomlThatReadsBack) {
  EXPECT_EQ(toml_float(65536.0), "65536.0");
  EXPECT_EQ(toml_float(1e-8), "1e-08");
  EXPECT_EQ(toml_float(0.1), "0.1");
  EXPECT_EQ(toml_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
  ConfigWriter out;
  ConfigWriter& t = out.table("t", "a table");
  t.set("i", 3, "an int");
  t.set("f", 65536.0);
  t.set("s", std::string("x\"y"));
  t.set("v", std::vector<double>{0.9, 0.95});
  t.set("w", std::vector<std::string>{"bias"});
  t.table("sub").set("b", true);
  const std::string text = out.str();
  EXPECT_NE(text.find("# a table\n[t]\ni = 3"), std::string::npos) << text;
  EXPECT_NE(text.find("[t.sub]\nb = true"), std::string::npos) << text;
  ConfigTable root = ConfigTable::parse_string(text, "written.toml");
  ConfigTable back = root.table("t");
  EXPECT_EQ(back.get("i", 0), 3);
  EXPECT_DOUBLE_EQ(back.get("f", 0.0), 65536.0);
  EXPECT_EQ(back.get<std::string>("s", ""), "x\"y");
  EXPECT_EQ(back.get("v", std::vector<double>{}), (std::vector<double>{0.9, 0.95}));
  EXPECT_TRUE(back.table("sub").get("b", false));
}

}  // namespace
}  // namespace zest
