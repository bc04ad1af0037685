// OptimConfig / SchedulerConfig: enum names, the weight-decay exclusion rule, and the [optimizer] and
// [scheduler] TOML readers (strict) and writers.
#include "optim/optim_config.h"

#include "core/config_reader.h"
#include "core/config_writer.h"
#include "core/field_table.h"
#include "optim/optimizer_spec.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace zest {

const char* to_string(OptimizerKind k) { return optimizer_spec(k).name.c_str(); }

const char* to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::constant: return "constant";
    case ScheduleKind::cosine: return "cosine";
    case ScheduleKind::linear: return "linear";
  }
  return "?";
}

bool no_decay_matches(const std::vector<std::string>& patterns, const std::string& param_name) {
  size_t start = 0;
  while (start <= param_name.size()) {
    const size_t dot = param_name.find('.', start);
    const std::string component = param_name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    for (const auto& pattern : patterns) {
      if (!pattern.empty() && component.find(pattern) != std::string::npos) return true;
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return false;
}

namespace {

constexpr ScheduleKind kSchedules[] = {ScheduleKind::constant, ScheduleKind::cosine, ScheduleKind::linear};

// DeepSpeed's layout ({"type": ..., "params": {...}}) and names, with the zest spelling.
const std::map<std::string, std::string> kOptimizerHints = {
    {"type", "zest calls it name"},
    {"params", "zest reads lr, betas, ... directly in [optimizer], not in [optimizer.params]"},
    {"beta1", "write betas = [beta1, beta2]"},
    {"beta2", "write betas = [beta1, beta2]"},
};
const std::map<std::string, std::string> kSchedulerHints = {
    {"type", "zest calls it name"},
    {"params", "zest reads warmup_steps, ... directly in [scheduler], not in [scheduler.params]"},
    {"warmup_num_steps", "zest calls it warmup_steps"},
    {"total_num_steps", "zest counts decay_steps after warm-up"},
};

// The optimizers reading `key` (their rules' kKeys): "\"adamw\" or \"lion\"".
std::string readers_of(const std::string& key) {
  std::vector<std::string> names;
  for (const OptimizerSpec& spec : optimizer_specs())
    if (spec.reads(key)) names.push_back(spec.name);
  std::string who = "\"" + names.at(0) + "\"";
  for (size_t i = 1; i < names.size(); ++i) who += (i + 1 == names.size() ? " or \"" : ", \"") + names[i] + "\"";
  return who;
}

// The key's doc from the rules that read it: "adamw: Adam moment decay rates ...; lion: ...".
std::string key_doc(const std::string& key) {
  std::vector<std::string> docs;
  for (const OptimizerSpec& spec : optimizer_specs())
    for (const HyperKey& k : spec.keys)
      if (key == k.key) docs.push_back(spec.name + ": " + k.doc);
  if (docs.size() == 1) return docs[0].substr(docs[0].find(": ") + 2);
  std::string out;
  for (const std::string& d : docs) out += (out.empty() ? "" : "; ") + d;
  return out;
}

// A key only some optimizers read: written for those, refused (naming them) for the others, since silently
// ignoring it hides a mistake.
template <typename Builder>
void only_for_readers(Builder&& builder, const std::string& key) {
  builder.only_with([key](const OptimConfig& c) { return optimizer_spec(c.name).reads(key); },
                    [key](const OptimConfig& c) {
                      return "is only used by optimizer " + readers_of(key) + " (name is \"" + to_string(c.name) + "\")";
                    });
}

}  // namespace

const FieldTable<OptimConfig>& optim_fields() {
  static const FieldTable<OptimConfig> table = [] {
    using C = OptimConfig;
    FieldTable<C> t("optimizer", "optimizer of the fp32 master shards", kOptimizerHints);
    std::string names;
    for (const OptimizerSpec& spec : optimizer_specs()) names += (names.empty() ? "" : "|") + spec.name;
    // Another optimizer brings its own default betas (optim/lion.h).
    t.enumeration<OptimizerKind>(
         "name", [](const C& c) { return c.name; },
         [](C& c, OptimizerKind name) {
           c.name = name;
           c.beta1 = optimizer_spec(name).default_beta1;
           c.beta2 = optimizer_spec(name).default_beta2;
         },
         kOptimizerKinds, names)
        .reference("optimizer of the fp32 master shards; `lion` is Lion (Chen et al. 2023): p ← p·(1 − lr·wd) − "
                   "lr·sign(β1·m + (1−β1)·g), then m ← β2·m + (1−β2)·g, one fp32 state tensor (`exp_avg`), so 4 bytes "
                   "per parameter instead of AdamW's 8; it typically wants a 3–10× smaller lr than AdamW");
    t.number("lr", &C::lr, "peak learning rate").above(0, "must be > 0");
    auto betas = t.value<std::vector<double>>(
        "betas", [](const C& c) { return std::vector<double>{c.beta1, c.beta2}; },
        [](C& c, std::vector<double> v) {
          if (v.size() != 2)
            throw FieldValueError{"must have exactly 2 values [beta1, beta2] (got " + std::to_string(v.size()) + ")"};
          c.beta1 = v[0];
          c.beta2 = v[1];
        },
        key_doc("betas"));
    betas.check([](const C& c) { return c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1; },
               [](const C& c) {
                 const double bad = c.beta1 >= 0 && c.beta1 < 1 ? c.beta2 : c.beta1;
                 return "each beta must be in [0, 1) (got " + toml_float(bad) + ")";
               })
        .type("[float, float], each in [0, 1)")
        .default_text("[0.9, 0.999]; lion [0.9, 0.99]")
        .reference("adamw: moment decay rates; lion: β1 of the update's interpolation, β2 of the momentum (adamw and "
                   "lion only)");
    only_for_readers(betas, "betas");
    auto eps = t.number("eps", &C::eps, key_doc("eps"));
    eps.above(0, "must be > 0").reference("Adam denominator epsilon (adamw only)");
    only_for_readers(eps, "eps");
    t.number("weight_decay", &C::weight_decay, "decoupled weight decay (AdamW, Lion) / L2 (SGD)")
        .at_least(0, "must be >= 0")
        .reference("decoupled weight decay (AdamW, Lion), L2 term (SGD)");
    auto momentum = t.number("momentum", &C::momentum, key_doc("momentum"));
    momentum.check_value([](double m) { return m >= 0 && m < 1; }, "must be in [0, 1)")
        .type("float in [0, 1)")
        .reference("SGD momentum (sgd only)");
    only_for_readers(momentum, "momentum");
    auto nesterov = t.boolean("nesterov", &C::nesterov, key_doc("nesterov"));
    nesterov.check([](const C& c) { return !c.nesterov || c.momentum > 0; }, "needs momentum > 0")
        .reference("Nesterov momentum (sgd only; needs momentum > 0)");
    only_for_readers(nesterov, "nesterov");
    t.list("no_decay", &C::no_decay, "name patterns excluded from weight decay")
        .check_value([](const std::vector<std::string>& patterns) {
          return std::none_of(patterns.begin(), patterns.end(), [](const std::string& p) { return p.empty(); });
        }, "patterns must not be empty (an empty one would match nothing)")
        .reference("a parameter gets no weight decay when a pattern is a substring of one of its dot-separated name "
                   "components (`norm` matches `norm1.weight`, `q_norm.weight`)");
    return t;
  }();
  return table;
}

const FieldTable<SchedulerConfig>& scheduler_fields() {
  static const FieldTable<SchedulerConfig> table = [] {
    using C = SchedulerConfig;
    FieldTable<C> t("scheduler", "learning-rate schedule", kSchedulerHints);
    const auto decays = [](const C& c) { return c.name != ScheduleKind::constant; };
    const std::string constant = "is only used by the cosine and linear schedules (name is \"constant\")";
    t.enumeration("name", &C::name, kSchedules, "constant|cosine|linear").reference("learning-rate schedule after warm-up");
    t.integer("warmup_steps", &C::warmup_steps, "linear warm-up steps: update t (from 0) uses lr*(t+1)/warmup_steps")
        .at_least(0, "must be >= 0")
        .type("int ≥ 0, ≤ train.max_steps")
        .reference("linear warm-up: update t (0-based) uses lr·(t+1)/warmup_steps");
    t.integer("decay_steps", &C::decay_steps, "steps of decay after warm-up")
        .at_least(0, "must be >= 0")
        .only_with(decays, constant)
        .default_text("0 → max_steps − warmup_steps")
        .reference("steps of cosine/linear decay after warm-up (cosine/linear only)");
    t.number("min_lr", &C::min_lr, "learning rate at the end of decay")
        .at_least(0, "must be >= 0")
        .only_with(decays, constant)
        .type("float ≥ 0, ≤ optimizer.lr")
        .reference("learning rate at the end of decay (cosine/linear only)");
    return t;
  }();
  return table;
}

OptimConfig OptimConfig::from_toml(ConfigTable& table) { return optim_fields().read(table); }

SchedulerConfig SchedulerConfig::from_toml(ConfigTable& table) { return scheduler_fields().read(table); }

void to_toml(const OptimConfig& c, ConfigWriter& out) { optim_fields().write(c, out); }

void to_toml(const SchedulerConfig& c, ConfigWriter& out) { scheduler_fields().write(c, out); }

}  // namespace zest
