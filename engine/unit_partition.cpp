// Parameter-to-unit assignment (see unit_partition.h).
#include "engine/unit_partition.h"

#include "core/check.h"
#include "optim/optim_config.h"

#include <map>

namespace zest {
namespace {

bool prefix_matches(const std::string& prefix, const std::string& name) {
  if (!prefix.empty() && prefix.back() == '.') return name.rfind(prefix, 0) == 0;
  return name == prefix;
}

int find_unit(const std::vector<UnitDecl>& decls, const std::string& name) {
  for (size_t u = 0; u < decls.size(); ++u) {
    for (const auto& prefix : decls[u].prefixes) {
      if (prefix_matches(prefix, name)) return static_cast<int>(u);
    }
  }
  return -1;
}

}  // namespace

std::vector<UnitParams> partition_into_units(torch::nn::Module& model, const std::vector<UnitDecl>& decls,
                                             const std::vector<std::string>& no_decay) {
  ZEST_CHECK(!decls.empty(), "the model declares no units");
  std::vector<UnitParams> units(decls.size());
  for (size_t u = 0; u < decls.size(); ++u) units[u].name = decls[u].name;

  std::map<const void*, std::pair<int, size_t>> seen;  // TensorImpl → (unit, slot) of first name
  std::vector<std::string> unmatched;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    const torch::Tensor& param = item.value();
    if (!param.requires_grad()) continue;
    const void* impl = param.unsafeGetTensorImpl();
    if (auto it = seen.find(impl); it != seen.end()) {
      units[it->second.first].slots[it->second.second].aliases.push_back(name);
      continue;
    }
    const int u = find_unit(decls, name);
    if (u < 0) {
      unmatched.push_back(name);
      continue;
    }
    ParamSlot slot;
    slot.name = name;
    slot.shape = param.sizes().vec();
    slot.numel = param.numel();
    slot.decay = !no_decay_matches(no_decay, name);
    seen[impl] = {u, units[u].slots.size()};
    units[u].slots.push_back(std::move(slot));
    units[u].tensors.push_back(param);
  }
  if (!unmatched.empty()) {
    std::string list;
    for (size_t i = 0; i < unmatched.size() && i < 8; ++i) list += (i ? ", " : "") + unmatched[i];
    ZEST_FAIL(unmatched.size(), " trainable parameter(s) belong to no declared unit: ", list,
              unmatched.size() > 8 ? ", ..." : "", " — add a unit prefix for them");
  }
  for (const auto& unit : units) {
    ZEST_CHECK(!unit.slots.empty(), "unit '", unit.name, "' matches no trainable parameter; check its prefixes");
  }
  return units;
}

std::vector<UnitDecl> units_with_trainable_params(torch::nn::Module& model, const std::vector<UnitDecl>& decls) {
  std::vector<bool> claims_any(decls.size(), false), claims_trainable(decls.size(), false);
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const int u = find_unit(decls, item.key());
    if (u < 0) continue;
    claims_any[static_cast<size_t>(u)] = true;
    if (item.value().requires_grad()) claims_trainable[static_cast<size_t>(u)] = true;
  }
  std::vector<UnitDecl> kept;
  for (size_t u = 0; u < decls.size(); ++u)
    if (claims_trainable[u] || !claims_any[u]) kept.push_back(decls[u]);
  return kept;
}

}  // namespace zest
