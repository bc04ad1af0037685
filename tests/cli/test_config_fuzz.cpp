// Seeded fuzzing of run files: several hundred mutations of valid run files (keys and sections deleted,
// duplicated or misspelled, wrong types, extreme and negative numbers, huge strings, bad paths, broken
// TOML, binary garbage, deep nesting, bad --set overrides) go through the run-config parser in-process,
// and a sample of them through `zest config check`. Every case must end, within a time bound, in OK or
// in one clear error line naming the file (or the --set argument), never a crash, hang or stack trace.
// ZEST_FUZZ_SEED=N replays another seed; ZEST_FUZZ_VERBOSE=1 prints every case's outcome.
#include "cli_test_util.h"
#include "common/temp_dir.h"

#include "core/check.h"
#include "train/run_config.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <random>
#include <sstream>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

// Valid run files covering every table; @MODEL@ is replaced by the path of a model file.
const std::vector<std::string> kBases = {
    R"([model]
name = "hymotion_tiny"

[data]
dir = "data/hymotion_tiny"
batch_size = 4
num_workers = 2
seq_len = 24

[engine]
stage = 2
precision = "bf16"
reduce_dtype = "fp32"
accumulation_steps = 2
clip_norm = 1.0
bucket_mb = 25.0
activation_checkpointing = "every_k"
checkpoint_every = 2
max_nonfinite_steps = 5
threads = 0

[optimizer]
name = "adamw"
lr = 1e-3
betas = [0.9, 0.999]
eps = 1e-8
weight_decay = 0.01
no_decay = ["bias", "norm"]

[scheduler]
name = "cosine"
warmup_steps = 5
min_lr = 1e-5

[train]
max_steps = 40
seed = 3
log_every = 5
run_dir = "runs/fuzz"

[checkpoint]
dir = "runs/fuzz/ckpt"
every_steps = 20
keep_last = 2
async = true
merge_at_end = false
)",
    R"([model]
config = "@MODEL@"
family = "hymotion"

[data]
dir = "data/x"

[engine]
stage = 1
precision = "fp32"

[optimizer]
name = "sgd"
lr = 0.05
momentum = 0.9
nesterov = true

[scheduler]
name = "linear"
warmup_steps = 2
decay_steps = 10

[train]
max_steps = 12
)",
    R"([model]
name = "unet_tiny"

[data]
dir = "data/unet_tiny"
batch_size = 2

[engine]
stage = 0
precision = "fp32"

[train]
max_steps = 3
log_every = 1
)"};

using Rng = std::mt19937_64;

size_t pick(Rng& rng, size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }
template <typename T>
const T& pick_of(Rng& rng, const std::vector<T>& values) { return values[pick(rng, values.size())]; }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}
std::string join(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}
bool is_key_line(const std::string& line) { return line.find(" = ") != std::string::npos && line[0] != '['; }
bool is_header(const std::string& line) { return !line.empty() && line[0] == '['; }
// The lines that are `what`; when there is none (a file already mangled by another mutation), a line
// `what` is appended so that the mutation still has something to work on.
std::vector<size_t> indices(std::vector<std::string>& lines, bool (*what)(const std::string&)) {
  std::vector<size_t> out;
  for (size_t i = 0; i < lines.size(); ++i)
    if (what(lines[i])) out.push_back(i);
  if (out.empty()) {
    lines.push_back(what("[x]") ? "[engine]" : "stage = 1");
    out.push_back(lines.size() - 1);
  }
  return out;
}

std::string misspell(std::string word, Rng& rng) {
  if (word.size() < 2) return word + "x";
  const size_t at = pick(rng, word.size() - 1);
  switch (pick(rng, 4)) {
    case 0: std::swap(word[at], word[at + 1]); break;
    case 1: word.erase(at, 1); break;
    case 2: word.insert(at, 1, static_cast<char>('a' + pick(rng, 26))); break;
    default: word[at] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[at]))); break;
  }
  return word;
}

// Replaces the value of a random key line with `value`.
std::string with_value(const std::string& text, Rng& rng, const std::string& value) {
  auto lines = lines_of(text);
  const auto keys = indices(lines, is_key_line);
  std::string& line = lines[pick_of(rng, keys)];
  line = line.substr(0, line.find(" = ") + 3) + value;
  return join(lines);
}

std::string random_bytes(Rng& rng, size_t n) {
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(pick(rng, 256));
  return bytes;
}

struct Mutation {
  std::string name;
  std::function<std::string(const std::string&, Rng&)> apply;
};

// Mutations of the structure: keys and sections deleted, duplicated, misspelled.
std::vector<Mutation> structure_mutations() {
  return {
      {"delete key", [](const std::string& t, Rng& rng) {
         auto lines = lines_of(t);
         lines.erase(lines.begin() + static_cast<long>(pick_of(rng, indices(lines, is_key_line))));
         return join(lines);
       }},
      {"duplicate key", [](const std::string& t, Rng& rng) {
         auto lines = lines_of(t);
         const size_t at = pick_of(rng, indices(lines, is_key_line));
         lines.insert(lines.begin() + static_cast<long>(at), lines[at]);
         return join(lines);
       }},
      {"misspell key", [](const std::string& t, Rng& rng) {
         auto lines = lines_of(t);
         std::string& line = lines[pick_of(rng, indices(lines, is_key_line))];
         const size_t eq = line.find(" = ");
         line = misspell(line.substr(0, eq), rng) + line.substr(eq);
         return join(lines);
       }},
      {"delete section header", [](const std::string& t, Rng& rng) {
         auto lines = lines_of(t);
         lines.erase(lines.begin() + static_cast<long>(pick_of(rng, indices(lines, is_header))));
         return join(lines);
       }},
      {"duplicate section", [](const std::string& t, Rng& rng) {
         auto lines = lines_of(t);
         const size_t at = pick_of(rng, indices(lines, is_header));
         std::vector<std::string> copy;
         for (size_t i = at; i < lines.size() && (i == at || !is_header(lines[i])); ++i) copy.push_back(lines[i]);
         return join(lines) + "\n" + join(copy);
       }},
      {"misspell section", [](const std::string& t, Rng& rng) {
         auto lines = lines_of(t);
         std::string& line = lines[pick_of(rng, indices(lines, is_header))];
         line = "[" + misspell(line.substr(1, line.size() - 2), rng) + "]";
         return join(lines);
       }},
  };
}

// Mutations of values: wrong types, extreme and negative numbers, huge strings, bad paths.
std::vector<Mutation> value_mutations() {
  return {
      {"wrong type", [](const std::string& t, Rng& rng) {
         static const std::vector<std::string> values = {"\"text\"", "true", "[1, 2]", "{ a = 1 }", "1.5", "7",
                                                         "1979-05-27T07:32:00Z", "[]", "[\"a\", 1]", "\"\""};
         return with_value(t, rng, pick_of(rng, values));
       }},
      {"extreme number", [](const std::string& t, Rng& rng) {
         static const std::vector<std::string> values = {
             "9223372036854775807", "-9223372036854775808", "2147483648", "-2147483649", "4294967296", "1e308",
             "-1e308", "inf", "-inf", "nan", "0", "1e-320", "99999999999999999999", "0x7fffffff", "1_000_000_000_000"};
         return with_value(t, rng, pick_of(rng, values));
       }},
      {"negative number", [](const std::string& t, Rng& rng) {
         static const std::vector<std::string> values = {"-1", "-2", "-0.5", "-1000000", "-0", "-1e-3"};
         return with_value(t, rng, pick_of(rng, values));
       }},
      {"huge string", [](const std::string& t, Rng& rng) {
         if (pick(rng, 2) == 0) return with_value(t, rng, "\"" + std::string(1 << 20, 'a') + "\"");
         auto lines = lines_of(t);
         lines.insert(lines.begin() + 1, std::string(100000, 'k') + " = 1");  // a huge key
         return join(lines);
       }},
      {"bad path", [](const std::string& t, Rng& rng) {
         static const std::vector<std::string> keys = {"config", "dir", "run_dir"};
         static const std::vector<std::string> values = {
             "\"\"", "\"/nonexistent/run.toml\"", "\"/dev/null\"", "\"/dev/zero\"", "\"/\"", "\"..\"",
             "\"a\\u0000b\"", "\"~/x\"", "\"" + std::string(5000, 'p') + "\"", "\"/proc/self/mem\"", "\"\\n\""};
         auto lines = lines_of(t);
         const std::string& key = pick_of(rng, keys);
         for (std::string& line : lines)
           if (line.rfind(key + " = ", 0) == 0) line = key + " = " + pick_of(rng, values);
         return join(lines);
       }},
  };
}

// Mutations of the bytes: broken TOML, binary garbage, nesting deeper than any parser should recurse.
std::vector<Mutation> syntax_mutations() {
  return {
      {"broken syntax", [](const std::string& t, Rng& rng) {
         std::string text = t;
         switch (pick(rng, 6)) {
           case 0: {  // drop a structural character
             std::vector<size_t> at;
             for (size_t i = 0; i < text.size(); ++i)
               if (std::string("[]\"=").find(text[i]) != std::string::npos) at.push_back(i);
             if (!at.empty()) text.erase(pick_of(rng, at), 1);
             break;
           }
           case 1: text.insert(pick(rng, text.size() + 1), 1, "[]{}=\"',#\\"[pick(rng, 10)]); break;
           case 2: text.resize(pick(rng, text.size() + 1)); break;  // truncated file
           case 3: text += "unterminated = \"abc\n"; break;
           case 4: text += "key_without_value =\n"; break;
           default: text += "[[[engine]]\n"; break;
         }
         return text;
       }},
      {"binary garbage", [](const std::string& t, Rng& rng) {
         switch (pick(rng, 4)) {
           case 0: return random_bytes(rng, 1 + pick(rng, 4096));  // the whole file
           case 1: {
             std::string text = t;
             text.insert(pick(rng, text.size() + 1), random_bytes(rng, 1 + pick(rng, 64)));
             return text;
           }
           case 2: return t + std::string("\0\0\0", 3);
           default: return with_value(t, rng, "\"\xC3\x28\xFF\xFE\"");  // invalid UTF-8 in a string
         }
       }},
      {"deep nesting", [](const std::string& t, Rng& rng) {
         const size_t depth = 1000 + pick(rng, 20000);
         if (pick(rng, 2) == 0) return t + "deep = " + std::string(depth, '[') + std::string(depth, ']') + "\n";
         std::string table = "deep = ";
         for (size_t i = 0; i < depth; ++i) table += "{ a = ";
         table += "1";
         for (size_t i = 0; i < depth; ++i) table += " }";
         return t + table + "\n";
       }},
  };
}

// Every mutation the fuzz applies, by name (the counts are reported per name).
std::vector<Mutation> mutations() {
  std::vector<Mutation> all = structure_mutations();
  for (auto group : {value_mutations(), syntax_mutations()}) all.insert(all.end(), group.begin(), group.end());
  return all;
}

// --set arguments a user could mistype.
const std::vector<std::string> kBadOverrides = {
    "engine.stage=", "=1", "engine", "a.b.c.d=1", "engine.stage=[[[", "data.batch_size=1e400",
    "data.batch_size=99999999999999999999", "engine.stage=\"2\"", "train.max_steps=-5", "optimizer.betas=[0.9,",
    "model.config=/nonexistent.toml", "data.num_workers=100000", "engine.threads=1000000", "engine.precision=fp8",
    "train.run_dir=", ".=.", "engine..stage=1", "checkpoint.keep_last=1.5", "scheduler=1", "engine.loss_scale.x=1",
    "data.seq_len=2147483648", "train.log_every=0", "engine.stage=\xFF\xFE", "data.dir=\"\\u0000\""};

struct Case {
  std::string name;
  std::string text;
  std::vector<std::string> overrides;
};

struct Outcome {
  bool ok = false;
  std::string error;    // the message, when not ok
  std::string problem;  // non-empty: the case failed the fuzz's rules
};

// The in-process rules: zest::Error only, one line, naming the file or the --set argument.
Outcome check_in_process(const std::string& path, const Case& c) {
  Outcome o;
  try {
    check_run_model(parse_run_config(path, c.overrides));  // what `zest config check` runs
    o.ok = true;
  } catch (const Error& e) {
    o.error = e.what();
    if (o.error.empty()) o.problem = "empty message";
    else if (o.error.find('\n') != std::string::npos) o.problem = "message of more than one line";
    else if (o.error.find(path) == std::string::npos && o.error.find("--set") == std::string::npos)
      o.problem = "message names neither the file nor the --set argument";
  } catch (const std::exception& e) {
    o.problem = std::string("not a zest::Error: ") + e.what();
  } catch (...) {
    o.problem = "a non-standard exception";
  }
  return o;
}

// The cases of one seed: every mutation 20 times on a random base, 30 stacks of 2-4 mutations, and
// every bad --set on a random base.
std::vector<Case> make_cases(Rng& rng, const std::vector<std::string>& bases) {
  const auto all = mutations();
  std::vector<Case> cases;
  for (int round = 0; round < 20; ++round)
    for (const Mutation& m : all) cases.push_back({m.name, m.apply(pick_of(rng, bases), rng), {}});
  for (int i = 0; i < 30; ++i) {
    std::string text = pick_of(rng, bases);
    for (size_t k = 0, n = 2 + pick(rng, 3); k < n; ++k) text = pick_of(rng, all).apply(text, rng);
    cases.push_back({"combined", text, {}});
  }
  for (const std::string& o : kBadOverrides) cases.push_back({"bad --set", pick_of(rng, bases), {o}});
  return cases;
}

// The binary's rules: exit 0 with the resolved config, or exit 1 with one short line on stderr; the
// same verdict as in-process.
void check_through_binary(const std::string& path, const Case& c, const Outcome& in_process, const std::string& label) {
  std::vector<std::string> argv{zest_binary(), "config", "check", path};
  for (const std::string& s : c.overrides) argv.insert(argv.end(), {"--set", s});
  CliOptions bounded;
  bounded.timeout_s = 30;
  const CliResult r = run_cli(argv, bounded);
  ASSERT_TRUE(r.exited()) << label << ": " << r.describe();
  EXPECT_EQ(r.code(), in_process.ok ? 0 : 1) << label << ": " << r.describe();
  if (r.code() == 0) {
    EXPECT_TRUE(r.err.empty()) << label << ": " << r.describe();
    EXPECT_NE(r.out.find("[engine]"), std::string::npos) << label << ": " << r.describe();
  } else {
    EXPECT_EQ(one_clear_error_line(r.err), "") << label << ": " << r.describe();
    EXPECT_LT(r.err.size(), 5000u) << label << ": a huge value was echoed whole";
  }
}

// The bases with @MODEL@ pointing at a copy of the tiny HY-Motion configuration in `dir`.
std::vector<std::string> make_bases(const std::string& dir) {
  const fs::path model = fs::path(dir) / "hymotion_fuzz.toml";
  fs::copy_file(fs::path(ZEST_SOURCE_DIR) / "configs/models/hymotion_tiny.toml", model);
  std::vector<std::string> bases;
  for (std::string base : kBases) {
    const size_t at = base.find("@MODEL@");
    if (at != std::string::npos) base.replace(at, 7, model.string());
    bases.push_back(base);
  }
  return bases;
}

TEST(ConfigFuzz, EveryMutatedRunFileEndsInOkOrOneClearError) {
  const char* seed_text = std::getenv("ZEST_FUZZ_SEED");
  const uint64_t seed = seed_text ? std::strtoull(seed_text, nullptr, 10) : 20240611;
  Rng rng(seed);
  const TempDir dir("config_fuzz");
  const std::vector<Case> cases = make_cases(rng, make_bases(dir.path()));
  std::map<std::string, std::pair<int, int>> per_mutation;  // name → (ok, error)
  int ok = 0, errors = 0, cli_runs = 0;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string path = (fs::path(dir.path()) / ("case_" + std::to_string(i) + ".toml")).string();
    std::ofstream(path, std::ios::binary) << c.text;
    const std::string label = "case " + std::to_string(i) + " (" + c.name + ", seed " + std::to_string(seed) + ")";
    // A hang cannot be interrupted in-process: past the bound the test reports the case and ends.
    auto future = std::async(std::launch::async, check_in_process, path, c);
    if (future.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      std::cerr << label << " did not finish within 10 s; its file: " << path << std::endl;
      std::_Exit(1);
    }
    const Outcome o = future.get();
    EXPECT_EQ(o.problem, "") << label << ": " << o.error.substr(0, 300);
    if (std::getenv("ZEST_FUZZ_VERBOSE")) std::cout << label << ": " << (o.ok ? "OK" : o.error.substr(0, 300)) << "\n";
    (o.ok ? ok : errors) += 1;
    (o.ok ? per_mutation[c.name].first : per_mutation[c.name].second) += 1;
    if (i % 20 == 0) {  // a sample through the binary
      check_through_binary(path, c, o, label);
      ++cli_runs;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "config fuzz (seed " << seed << "): " << cases.size() << " cases, " << ok << " OK, " << errors
            << " clear errors, " << cli_runs << " of them also through `zest config check`, " << seconds << " s\n";
  for (const auto& [name, counts] : per_mutation)
    std::cout << "  " << name << ": " << counts.first << " OK, " << counts.second << " errors\n";
  EXPECT_GE(cases.size(), 200u);
  RecordProperty("cases", static_cast<int>(cases.size()));
  RecordProperty("ok", ok);
  RecordProperty("errors", errors);
}

}  // namespace
}  // namespace zest::testing
