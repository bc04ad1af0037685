// Manifest rules (see manifest_check.h).
#include "checkpoint/manifest_check.h"

#include "checkpoint/directory.h"
#include "core/check.h"
#include "engine/engine_config.h"
#include "engine/sharding_policy.h"
#include "optim/optimizer_spec.h"

#include <filesystem>
#include <set>

namespace zest::checkpoint {
namespace {

void check_identity(const Manifest& m, std::vector<std::string>& problems) {
  if (!ShardingPolicy::is_stage(m.stage))
    problems.push_back(str("stage is ", m.stage, ", expected 0 to ", ShardingPolicy::kMaxStage));
  if (!precision_named(m.precision))
    problems.push_back("precision is '" + m.precision + "', expected fp32, bf16 or fp16");
  if (m.config_hash != config_hash(m.model_name, m.model_config))
    problems.push_back("model.config_hash is '" + m.config_hash + "' but the model name and config hash to '" +
                       config_hash(m.model_name, m.model_config) + "'");
  const bool ema = m.ema.has_value();
  if (m.kinds != expected_kinds(m.optimizer.name, ema)) {
    std::string listed;
    for (const auto& k : m.kinds) listed += (listed.empty() ? "" : ", ") + k;
    std::string expected;
    for (const auto& k : expected_kinds(m.optimizer.name, ema)) expected += (expected.empty() ? "" : ", ") + k;
    problems.push_back("kinds are [" + listed + "], expected [" + expected + "] for optimizer " +
                       to_string(m.optimizer.name) +
                       (ema ? " with an EMA (the manifest has 'ema' settings)"
                            : " without an EMA (the manifest has no 'ema' settings)"));
  }
}

// The [ema] ranges (optim/ema.h), as sentences.
void check_ema(const EmaConfig& e, std::vector<std::string>& problems) {
  for (const EmaConfig::RangeProblem& p : e.range_problems())
    problems.push_back(str("ema.", p.key, " is ", p.value, ", must be ", p.expected));
}

// The product of the shape; -1 when a dimension is negative or the product overflows.
int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

void check_slot(const UnitLayout& unit, const ParamSlot& slot, int64_t expected_offset,
                std::set<std::string>& names, std::vector<std::string>& problems) {
  const std::string at = "unit '" + unit.name + "', parameter '" + slot.name + "'";
  if (slot.name.empty()) problems.push_back("unit '" + unit.name + "' has a parameter without a name");
  if (!names.insert(slot.name).second) problems.push_back(at + ": the name appears twice in the manifest");
  for (const std::string& alias : slot.aliases)
    if (alias.empty() || !names.insert(alias).second)
      problems.push_back(at + ": alias '" + alias + "' is empty or names another parameter too");
  const int64_t product = shape_numel(slot.shape);
  if (product != slot.numel) problems.push_back(str(at, ": numel ", slot.numel, " is not the product of its shape"));
  if (slot.offset != expected_offset)
    problems.push_back(str(at, ": offset ", slot.offset, ", expected ", expected_offset,
                           " (parameters are stored in order, back to back; swapped or overlapping offsets?)"));
}

void check_unit(const UnitLayout& unit, int world_size, std::set<std::string>& unit_names,
                std::set<std::string>& param_names, std::vector<std::string>& problems) {
  const std::string at = str("unit '", unit.name, "'");
  if (unit.name.empty()) problems.emplace_back("a unit has no name");
  if (!unit_names.insert(unit.name).second) problems.push_back(str(at, ": the name appears twice"));
  int64_t end = 0;  // where the next parameter must start
  for (const ParamSlot& slot : unit.slots) {
    check_slot(unit, slot, end, param_names, problems);
    if (slot.numel < 0 || __builtin_add_overflow(end, slot.numel, &end)) end = -1;
    if (end < 0) break;  // one overflow report is enough
  }
  if (end != unit.numel) problems.push_back(str(at, ": numel ", unit.numel, " differs from its parameters' ", end));
  if (unit.padded_numel < unit.numel || unit.padded_numel % world_size != 0)
    problems.push_back(str(at, ": padded_numel ", unit.padded_numel, " must be >= numel ", unit.numel,
                           " and a multiple of world_size ", world_size));
}

}  // namespace

std::vector<std::string> expected_kinds(OptimizerKind optimizer, bool ema) {
  std::vector<std::string> kinds = {kMasterShard};
  const auto& states = optimizer_spec(optimizer).states;  // the optimizer's state tensors, in its order
  kinds.insert(kinds.end(), states.begin(), states.end());
  if (ema) kinds.emplace_back(kEmaShard);
  return kinds;
}

std::vector<std::string> manifest_problems(const Manifest& m) {
  std::vector<std::string> problems;
  if (m.step < 0) problems.push_back(str("step is ", m.step, ", expected >= 0"));
  if (m.world_size < 1) problems.push_back(str("world_size is ", m.world_size, ", expected >= 1"));
  if (!problems.empty()) return problems;  // the layout rules divide by world_size
  check_identity(m, problems);
  if (m.ema) check_ema(*m.ema, problems);
  std::set<std::string> unit_names, param_names;
  for (const UnitLayout& unit : m.units) check_unit(unit, m.world_size, unit_names, param_names, problems);
  if (static_cast<int>(m.files.size()) != m.world_size)
    problems.push_back(str(m.files.size(), " rank files listed for world_size ", m.world_size));
  for (size_t r = 0; r < m.files.size(); ++r)
    if (m.files[r].name != rank_file_name(static_cast<int>(r)))
      problems.push_back(str("files[", r, "] is '", m.files[r].name, "', expected '",
                             rank_file_name(static_cast<int>(r)), "'"));
  return problems;
}

void validate_manifest(const Manifest& m, const std::string& source) {
  const auto problems = manifest_problems(m);
  if (problems.empty()) return;
  constexpr size_t kShown = 6;
  std::string message = source + ": the checkpoint layout is inconsistent (" + std::to_string(problems.size()) +
                        " problem" + (problems.size() > 1 ? "s" : "") + "):";
  for (size_t i = 0; i < problems.size() && i < kShown; ++i) message += "\n  - " + problems[i];
  if (problems.size() > kShown) message += "\n  - and " + std::to_string(problems.size() - kShown) + " more";
  ZEST_FAIL(message);
}

void check_step_folder(const Manifest& m, const std::string& step_dir, const std::string& source) {
  std::filesystem::path folder = std::filesystem::path(step_dir).lexically_normal();
  if (folder.filename().empty()) folder = folder.parent_path();  // "DIR/step_N/"
  const auto step = parse_step_dir_name(folder.filename().string());
  ZEST_CHECK(!step || *step == m.step, source, ": says step ", m.step, " but its folder is ", step_dir_name(*step),
             ": the manifest belongs to another checkpoint (copied or renamed?)");
}

}  // namespace zest::checkpoint
