// The field tables (core/field_table.h) and the kernel switches (core/kernel_switches.h): an unknown key in any
// table names the file, the table and the nearest known key; every table reads back what it writes; the key
// table of docs/config_reference.md is the tables'; [engine.kernels] reaches the process's switches, with the
// environment as an override; and docs/design.md's "How to add a config key" / "How to add a kernel switch"
// with a table and a switch list of the test's own.
#include "tests/config/config_test_util.h"

#include "core/config_reader.h"
#include "core/config_writer.h"
#include "core/field_table.h"
#include "core/kernel_switches.h"
#include "core/untrusted_file.h"
#include "train/run_config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <set>
#include <sstream>

namespace zest {
namespace {

using test::expect_error;

const std::string kMinimal = "[model]\nname = \"hymotion_tiny\"\n[data]\ndir = \"data/motion\"\n";

RunConfig parse_text(const std::string& text, const std::vector<std::string>& overrides = {}) {
  ConfigTable root = ConfigTable::parse_string(text, "cfg.toml");
  root.apply_overrides(overrides);
  return run_config_from_toml(root);
}

// A run file that moves every table off its defaults (fp16 needs a GPU: [engine.loss_scale] is round-tripped
// on its own below).
const std::string kRich = kMinimal + R"(
batch_size = 3
num_workers = 0
seq_len = 24
caption_dropout = 0.25

[engine]
stage = 3
reshard_after_forward = false
prefetch = 2
precision = "fp32"
reduce_dtype = "bf16"
accumulation_steps = 2
clip_norm = 1.5
bucket_mb = 12.5
activation_checkpointing = "every_k"
checkpoint_every = 3
max_nonfinite_steps = 7
threads = 2
cuda_graphs = "off"
cudnn_benchmark = false
collective_timeout_s = 30.0
rendezvous_timeout_s = 20.0

[engine.offload]
optimizer = "cpu"
staging_mb = 64.0

[engine.kernels]
split_linear = false
conv_grad_fusion = true
sdpa_backend = "math"

[optimizer]
name = "lion"
lr = 3e-5
betas = [0.95, 0.98]
weight_decay = 0.1
no_decay = ["bias"]

[scheduler]
name = "cosine"
warmup_steps = 10
decay_steps = 90
min_lr = 1e-6

[ema]
decay = 0.99
min_decay = 0.5
update_every = 2
start_step = 3
use_ema_warmup = true
inv_gamma = 2.0
power = 0.75

[train]
max_steps = 100
seed = 5
log_every = 4
run_dir = "runs/rich"

[checkpoint]
dir = "ckpts"
every_steps = 10
keep_last = 0
async = true
merge_at_end = false
shared_fs = false

[sample]
every_steps = 5
prompts = ["a cat", "a dog"]
negative_prompt = "blurry"
steps = 20
guidance = 5.0
seed = 9
size = "256x128"
num_images = 2
scheduler = "euler"
frames = 90

[log]
tensorboard = false

[profile]
steps = [2, 3]

[loss]
prediction = "v_prediction"
snr_gamma = 5.0
noise_offset = 0.05
rescale_betas_zero_snr = true
min_timestep = 10
max_timestep = 900
min_time = 0.1
max_time = 0.9

[lora]
rank = 8
alpha = 16.0
dropout = 0.1
target_modules = ["to_q", "to_v"]
)";

TEST(FieldTables, UnknownKeysNameTheFileTheTableAndTheNearestKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[engine]\nstgae = 1\n", "cfg.toml:6:1: engine.stgae: unknown key (did you mean 'stage'?)"},
      {"[engine.offload]\nstagin_mb = 1.0\n", "cfg.toml:6:1: engine.offload.stagin_mb: unknown key (did you mean 'staging_mb'?)"},
      {"[engine.kernels]\nsplit_linaer = false\n",
       "cfg.toml:6:1: engine.kernels.split_linaer: unknown key (did you mean 'split_linear'?)"},
      {"[optimizer]\nweight_decy = 0.1\n", "cfg.toml:6:1: optimizer.weight_decy: unknown key (did you mean 'weight_decay'?)"},
      {"[sample]\nevery_step = 1\n", "cfg.toml:6:1: sample.every_step: unknown key (did you mean 'every_steps'?)"},
      {"[lora]\nrnk = 4\n", "cfg.toml:6:1: lora.rnk: unknown key (did you mean 'rank'?)"},
      {"[checkpoint]\nkeep_lats = 1\n", "cfg.toml:6:1: checkpoint.keep_lats: unknown key (did you mean 'keep_last'?)"},
      {"[loss]\nsnr_gama = 1.0\n", "cfg.toml:6:1: loss.snr_gama: unknown key (did you mean 'snr_gamma'?)"},
  };
  for (const auto& [text, message] : cases) expect_error([&] { parse_text(kMinimal + text); }, {message});
  // A foreign spelling gets its hint; the kernels table knows its environment variables.
  expect_error([&] { parse_text(kMinimal + "[engine.kernels]\nZEST_SPLIT_LINEAR = 0\n"); },
               {"engine.kernels.ZEST_SPLIT_LINEAR: unknown key (the variable ZEST_SPLIT_LINEAR is the key split_linear)"});
  expect_error([&] { parse_text(kMinimal, {"engine.kernels.qk_norm_rop=false"}); },
               {"--set engine.kernels.qk_norm_rop=false: engine.kernels.qk_norm_rop: unknown key (did you mean 'qk_norm_rope'?)"});
}

// read → write → read gives the same values, for every table: the defaults, a file that moves every key, and
// the tables a CPU run file cannot reach (fp16's loss scale).
TEST(FieldTables, EveryTableReadsBackWhatItWrites) {
  for (const std::string& text : {kMinimal, kRich}) {
    const RunConfig first = parse_text(text);
    const std::string written = to_toml(first);
    const RunConfig second = parse_text(written);
    const auto a = run_fields().values(first);
    const auto b = run_fields().values(second);
    EXPECT_TRUE(run_fields().diff(first, second).empty()) << written;
    EXPECT_EQ(to_toml(second), written);
    std::set<std::string> tables;
    for (const FieldValue& v : a) tables.insert(v.key.substr(0, v.key.find('.')));
    for (const auto& field : run_fields().fields()) EXPECT_TRUE(tables.count(field.key)) << field.key << " never written";
  }
  // The rich file really is off the defaults everywhere it can be.
  const RunConfig rich = parse_text(kRich);
  std::set<std::string> differing;
  for (const FieldDifference& d : run_fields().diff(parse_text(kMinimal), rich)) differing.insert(d.key);
  for (const char* key : {"data.caption_dropout", "engine.prefetch", "engine.offload.staging_mb",
                          "engine.kernels.split_linear", "engine.kernels.sdpa_backend", "optimizer.betas",
                          "scheduler.min_lr", "ema.power", "sample.frames", "profile.steps", "loss.max_timestep",
                          "lora.target_modules", "checkpoint.shared_fs", "log.tensorboard", "train.log_every"})
    EXPECT_TRUE(differing.count(key)) << key;

  ConfigTable root = ConfigTable::parse_string(
      "[engine]\nprecision = \"fp16\"\n[engine.loss_scale]\ninitial = 1024.0\nwindow = 10\nhysteresis = 2\nmin = 4.0\n"
      "at_min = \"warn\"\n",
      "cfg.toml");
  ConfigTable engine = root.table("engine");
  const EngineConfig fp16 = engine_fields().read(engine);
  ConfigWriter out;
  engine_fields().write(fp16, out);
  ConfigTable back_root = ConfigTable::parse_string(out.str(), "back.toml");
  ConfigTable back_engine = back_root.table("engine");
  const EngineConfig back = engine_fields().read(back_engine);
  EXPECT_TRUE(engine_fields().diff(fp16, back).empty()) << out.str();
  EXPECT_NE(out.str().find("[engine.loss_scale]\ninitial = 1024.0"), std::string::npos) << out.str();
}

// `zest config check` prints the tables in run-file order, [engine]'s sub-tables after its keys.
TEST(FieldTables, ResolvedConfigKeepsItsOrder) {
  const std::string text = to_toml(parse_text(kRich));
  size_t at = 0;
  for (const char* table : {"[model]", "[data]", "[engine]", "[engine.offload]", "[engine.kernels]", "[optimizer]",
                            "[scheduler]", "[ema]", "[train]", "[checkpoint]", "[sample]", "[log]", "[profile]",
                            "[loss]", "[lora]"}) {
    const size_t found = text.find(std::string("\n") + table + "\n", at);
    ASSERT_NE(found, std::string::npos) << table << " missing or out of order in\n" << text;
    at = found + 1;
  }
  EXPECT_NE(text.find("split_linear = false"), std::string::npos);
  EXPECT_NE(text.find("sdpa_backend = \"math\""), std::string::npos);
}

std::string docs_path() { return std::string(ZEST_SOURCE_DIR) + "/docs/config_reference.md"; }

// "section.key" of each row of a generated key table.
std::set<std::string> row_keys(const std::string& table) {
  std::set<std::string> keys;
  size_t start = 0;
  while (start < table.size()) {
    const size_t end = table.find('\n', start);
    const std::string line = table.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? table.size() : end + 1;
    if (line.rfind("| ", 0) != 0 || line.rfind("| section", 0) == 0) continue;
    const size_t a = line.find(" | ", 2);
    const size_t b = line.find(" | ", a + 3);
    if (a == std::string::npos || b == std::string::npos) continue;
    keys.insert(line.substr(2, a - 2) + "." + line.substr(a + 3, b - a - 3));
  }
  return keys;
}

// The first line where `a` and `b` differ, as "'<line of a>' against '<line of b>'".
std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream in_a(a), in_b(b);
  std::string x, y;
  while (true) {
    const bool more_a = static_cast<bool>(std::getline(in_a, x));
    const bool more_b = static_cast<bool>(std::getline(in_b, y));
    if (!more_a && !more_b) return "none";
    if (!more_a || !more_b || x != y) return "'" + (more_a ? x : "(end)") + "' against '" + (more_b ? y : "(end)") + "'";
  }
}

// docs/config_reference.md's key table is the field tables': a key without a docs row, a row without a key, or
// any other difference fails here until `zest config reference --update docs/config_reference.md` is run.
TEST(FieldTables, DocsKeyTableIsGeneratedFromTheTables) {
  const std::string docs = read_text_file(docs_path(), "docs");
  const size_t begin = docs.find(kReferenceBegin);
  const size_t end = docs.find(kReferenceEnd);
  ASSERT_NE(begin, std::string::npos) << "docs/config_reference.md lacks the line " << kReferenceBegin;
  ASSERT_NE(end, std::string::npos) << "docs/config_reference.md lacks the line " << kReferenceEnd;
  const std::string documented = docs.substr(begin, end - begin);
  const std::string generated = config_reference_markdown();
  const std::set<std::string> in_docs = row_keys(documented);
  const std::set<std::string> in_tables = row_keys(generated);
  for (const std::string& key : in_tables)
    EXPECT_TRUE(in_docs.count(key)) << key << " has no row in docs/config_reference.md";
  for (const std::string& key : in_docs)
    EXPECT_TRUE(in_tables.count(key)) << "docs/config_reference.md has a row for " << key << ", which no table has";
  EXPECT_TRUE(with_config_reference(docs) == docs)
      << "docs/config_reference.md's key table differs from the field tables (first difference: "
      << first_difference(documented, std::string(kReferenceBegin) + "\n" + generated)
      << "): run `build/zest config reference --update docs/config_reference.md`";
  EXPECT_GE(in_tables.size(), 90u);  // every table's keys, [engine.kernels] and [sample] included
  EXPECT_TRUE(in_tables.count("engine.kernels.sdpa_backend"));
  EXPECT_TRUE(in_tables.count("sample.frames"));
}

// ---- docs/design.md, "How to add a config key", with a table of the test's own ----

struct WidgetConfig {
  int count = 3;
  double scale = 1.5;
  std::string mode = "fast";
  bool verbose = false;
  std::vector<std::string> tags;
};

struct ToyRun {
  WidgetConfig widget;
};

const FieldTable<WidgetConfig>& widget_fields() {
  static const FieldTable<WidgetConfig> table = [] {
    using C = WidgetConfig;
    FieldTable<C> t("widget", "a test's own table", {{"number", "zest calls it count"}});
    t.integer("count", &C::count, "widgets per batch").at_least(1, "must be >= 1 (widgets per batch)");
    t.number("scale", &C::scale, "scale of each widget").above(0, "must be > 0");
    t.choice("mode", &C::mode, {"fast", "slow"}, "fast|slow");
    t.boolean("verbose", &C::verbose, "say more").only_with([](const C& c) { return c.mode == "slow"; },
                                                            "is only used with mode = \"slow\"");
    t.list("tags", &C::tags, "labels").written_when([](const C& c) { return !c.tags.empty(); });
    return t;
  }();
  return table;
}

const FieldTable<ToyRun>& toy_fields() {
  static const FieldTable<ToyRun> table = [] {
    FieldTable<ToyRun> t("", "");
    t.nested("widget", &ToyRun::widget, widget_fields());  // registered: one entry in the parent's table
    return t;
  }();
  return table;
}

ToyRun read_toy(const std::string& text) {
  ConfigTable root = ConfigTable::parse_string(text, "toy.toml");
  return toy_fields().read(root);
}

TEST(FieldTables, HowToAddAConfigKey) {
  const ToyRun toy = read_toy("[widget]\ncount = 5\nmode = \"slow\"\nverbose = true\n");
  EXPECT_EQ(toy.widget.count, 5);
  EXPECT_EQ(toy.widget.mode, "slow");
  EXPECT_TRUE(toy.widget.verbose);
  EXPECT_DOUBLE_EQ(toy.widget.scale, 1.5);  // the default: the struct's initialiser

  // Written back with every applicable key and its doc, and read back the same.
  ConfigWriter out;
  toy_fields().write_into(toy, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("[widget]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("count = 5"), std::string::npos) << text;
  EXPECT_NE(text.find("# widgets per batch"), std::string::npos) << text;
  EXPECT_EQ(text.find("tags"), std::string::npos) << "written only when set:\n" << text;
  EXPECT_TRUE(toy_fields().diff(toy, read_toy(text)).empty()) << text;

  // Diffed, key by key, against the defaults; a key that stops applying is absent on one side.
  std::vector<std::string> lines;
  for (const FieldDifference& d : toy_fields().diff(ToyRun{}, toy))
    lines.push_back(d.key + ": " + d.a.value_or("absent") + " -> " + d.b.value_or("absent"));
  EXPECT_EQ(lines, (std::vector<std::string>{"widget.count: 3 -> 5", "widget.mode: \"fast\" -> \"slow\"",
                                             "widget.verbose: absent -> true"}));
  // Recorded as JSON, in table order.
  EXPECT_EQ(record_json(toy_fields().values(toy)).dump(),
            R"({"widget":{"count":5,"scale":1.5,"mode":"slow","verbose":true}})");

  // Documented: one row per key, its type from the check.
  const std::string docs = reference_markdown(toy_fields().rows(""));
  EXPECT_NE(docs.find("| widget | count | int ≥ 1 | 3 | widgets per batch |"), std::string::npos) << docs;
  EXPECT_NE(docs.find("| widget | mode | fast \\| slow | fast | fast\\|slow |"), std::string::npos) << docs;

  // Checked, each error at its key.
  expect_error([] { read_toy("[widget]\ncont = 2\n"); }, {"toy.toml:2:1: widget.cont: unknown key (did you mean 'count'?)"});
  expect_error([] { read_toy("[widget]\nnumber = 2\n"); }, {"widget.number: unknown key (zest calls it count)"});
  expect_error([] { read_toy("[widget]\ncount = 0\n"); }, {"toy.toml:2:9: widget.count: must be >= 1 (widgets per batch)"});
  expect_error([] { read_toy("[widget]\nscale = \"big\"\n"); }, {"widget.scale: expected a number, got a string"});
  expect_error([] { read_toy("[widget]\nverbose = true\n"); }, {"widget.verbose: is only used with mode = \"slow\""});
  expect_error([] { read_toy("[widget]\nmode = \"fats\"\n"); }, {"widget.mode: \"fats\" is not one of \"fast\", \"slow\" (did you mean \"fast\"?)"});
}

// ---- kernel switches ----

// Sets an environment variable for a scope.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* was = std::getenv(name)) was_ = was;
    ::setenv(name, value, 1);
  }
  ~ScopedVariable() {
    if (was_) ::setenv(name_, was_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> was_;
};

TEST(KernelSwitches, EngineKernelsTableReachesTheSwitches) {
  KernelSwitches& process = KernelSwitches::process();
  const KernelsConfig before = process.current();
  const RunConfig config = parse_text(kMinimal + "[engine.kernels]\nsplit_linear = false\nconv_grad_fusion = true\n");
  EXPECT_FALSE(config.engine.kernels.on.at("split_linear"));
  EXPECT_TRUE(config.engine.kernels.on.at("qk_norm_rope"));  // a default
  EXPECT_EQ(config.engine.kernels.choice.at("sdpa_backend"), "auto");
  const KernelsConfig in_force = apply_run_kernels(config, /*print=*/false);
  EXPECT_EQ(in_force, config.engine.kernels);
  EXPECT_FALSE(kernel_switch("split_linear").enabled());
  EXPECT_TRUE(kernel_switch("conv_grad_fusion").enabled());
  EXPECT_TRUE(kernel_switch("linear_grad_fusion").enabled());
  {
    // An environment variable that is set wins, and says what it changed.
    const ScopedVariable variable("ZEST_SPLIT_LINEAR", "1");
    std::vector<std::string> lines;
    const KernelsConfig overridden = process.apply(config.engine.kernels, &lines);
    EXPECT_TRUE(overridden.on.at("split_linear"));
    EXPECT_TRUE(kernel_switch("split_linear").enabled());
    EXPECT_EQ(lines, (std::vector<std::string>{"ZEST_SPLIT_LINEAR=1 overrides [engine.kernels] split_linear = false"}));
  }
  {
    const ScopedVariable variable("ZEST_SDPA_BACKEND", "cudnn");
    std::vector<std::string> lines;
    EXPECT_EQ(process.apply(config.engine.kernels, &lines).choice.at("sdpa_backend"), "cudnn");
    EXPECT_EQ(lines, (std::vector<std::string>{"ZEST_SDPA_BACKEND=cudnn overrides [engine.kernels] sdpa_backend = \"auto\""}));
  }
  {
    const ScopedVariable variable("ZEST_SDPA_BACKEND", "fast");
    expect_error([&] { process.apply(config.engine.kernels); },
                 {"ZEST_SDPA_BACKEND must be auto, cudnn, efficient, flash or math, got 'fast'"});
  }
  expect_error([] { parse_text(kMinimal + "[engine.kernels]\nsdpa_backend = \"fast\"\n"); },
               {"engine.kernels.sdpa_backend: \"fast\" is not one of \"auto\", \"cudnn\", \"efficient\", \"flash\", \"math\""});
  expect_error([] { parse_text(kMinimal + "[engine.kernels]\nqk_norm_rope = 0\n"); },
               {"engine.kernels.qk_norm_rope: expected a boolean (true/false), got an integer"});
  process.apply(before);  // as the other tests found them
  EXPECT_EQ(process.current(), before);
}

// What the environment variables always meant: unset or empty is the default, "0" off, anything else on, read
// when the switch is made; set() overrides.
TEST(KernelSwitches, VariablesReadAsBefore) {
  const KernelSwitchSpec on_spec{"s", "ZEST_TEST_KERNEL_SWITCH", "true", {}, "doc", ""};
  const KernelSwitchSpec off_spec{"s", "ZEST_TEST_KERNEL_SWITCH", "false", {}, "doc", ""};
  const auto read_with = [&](const char* value, const KernelSwitchSpec& spec) {
    if (value == nullptr) ::unsetenv(spec.variable.c_str());
    else ::setenv(spec.variable.c_str(), value, 1);
    const KernelSwitch s(spec);
    ::unsetenv(spec.variable.c_str());
    return s.enabled();
  };
  EXPECT_TRUE(read_with(nullptr, on_spec));
  EXPECT_FALSE(read_with(nullptr, off_spec));
  EXPECT_TRUE(read_with("", on_spec));
  EXPECT_FALSE(read_with("0", on_spec));
  EXPECT_TRUE(read_with("1", off_spec));
  EXPECT_TRUE(read_with("yes", off_spec));
  KernelSwitch s(on_spec);
  s.set(false);
  EXPECT_FALSE(s.enabled());
  EXPECT_EQ(s.value(), "false");
}

// docs/design.md, "How to add a kernel switch": one entry in a switch list, read from [engine.kernels],
// written, documented, applied, and overridden by its variable.
TEST(KernelSwitches, HowToAddAKernelSwitch) {
  KernelSwitches switches({{"my_fusion", "ZEST_TEST_MY_FUSION", "true", {}, "CUDA: my fused path", ""},
                           {"my_backend", "ZEST_TEST_MY_BACKEND", "auto", {"auto", "fast"}, "my backend", ""}},
                          "engine.kernels");
  ConfigTable root = ConfigTable::parse_string("[engine.kernels]\nmy_fusion = false\n", "run.toml");
  ConfigTable table = root.table("engine").table("kernels");
  KernelsConfig config(switches.specs());
  switches.fields().read(table, config);
  EXPECT_FALSE(config.on.at("my_fusion"));
  EXPECT_EQ(config.choice.at("my_backend"), "auto");

  EXPECT_TRUE(switches.at("my_fusion").enabled());  // the default until applied
  switches.apply(config);
  EXPECT_FALSE(switches.at("my_fusion").enabled());

  ConfigWriter out;
  switches.fields().write(config, out);
  EXPECT_NE(out.str().find("my_fusion = false"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("my_backend = \"auto\""), std::string::npos) << out.str();
  const std::string docs = reference_markdown(switches.fields().rows("engine.kernels"));
  EXPECT_NE(docs.find("| engine.kernels | my_fusion | bool | true | CUDA: my fused path (`ZEST_TEST_MY_FUSION` overrides) |"),
            std::string::npos)
      << docs;

  const ScopedVariable variable("ZEST_TEST_MY_FUSION", "1");
  std::vector<std::string> lines;
  switches.apply(config, &lines);
  EXPECT_TRUE(switches.at("my_fusion").enabled());
  EXPECT_EQ(lines, (std::vector<std::string>{"ZEST_TEST_MY_FUSION=1 overrides [engine.kernels] my_fusion = false"}));
  expect_error([] { KernelSwitches::process().at("my_fusion"); }, {"no kernel switch 'my_fusion' in [engine.kernels]"});
}

}  // namespace
}  // namespace zest
