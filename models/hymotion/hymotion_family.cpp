// Registry hook of HY-Motion: builds, counts and runs the model from reference-named config and inputs.
#include "models/hymotion/hymotion.h"

#include "core/check.h"
#include "models/hymotion/flow_matching.h"

#include <set>

namespace zest::hymotion {
namespace {

const torch::Tensor& input(const TensorMap& inputs, const std::string& name) {
  const auto it = inputs.find(name);
  if (it == inputs.end()) {
    std::string known;
    for (const auto& [key, value] : inputs) known += (known.empty() ? "" : ", ") + key;
    ZEST_FAIL("HY-Motion forward: input '", name, "' is missing (given: ", known, ")");
  }
  return it->second;
}

torch::Tensor forward_named(UnitModule& model, const TensorMap& inputs) {
  auto* hy = dynamic_cast<HyMotionModel*>(&model);
  ZEST_CHECK(hy != nullptr, "HY-Motion forward called on a model of another family");
  const std::set<std::string> expected = {"x", "ctxt_input", "vtxt_input", "timesteps", "x_mask_temporal",
                                          "ctxt_mask_temporal"};
  for (const auto& [key, value] : inputs)
    ZEST_CHECK(expected.count(key) != 0, "HY-Motion forward: unknown input '", key,
               "' (expected x, ctxt_input, vtxt_input, timesteps, x_mask_temporal, ctxt_mask_temporal)");
  return hy->forward({input(inputs, "x"), input(inputs, "ctxt_input"), input(inputs, "vtxt_input"),
                      input(inputs, "timesteps"), input(inputs, "x_mask_temporal"),
                      input(inputs, "ctxt_mask_temporal")});
}

// Flow-matching loss on a loader batch: `x` holds the clean (normalised) motion, padded frames masked.
// The batch stays float32: x_t and the target are formed in float32 and the model casts to its compute
// dtype where the reference does under autocast (docs/models.md 5).
torch::Tensor training_loss(UnitModule& model, const TensorMap& batch, torch::Generator& generator) {
  auto* hy = dynamic_cast<HyMotionModel*>(&model);
  ZEST_CHECK(hy != nullptr, "HY-Motion training loss called on a model of another family");
  return flow_matching_loss(*hy, input(batch, "x"), input(batch, "ctxt_input"), input(batch, "vtxt_input"),
                            input(batch, "x_mask_temporal"), input(batch, "ctxt_mask_temporal"), generator);
}

}  // namespace

ModelFamily family() {
  ModelFamily f;
  f.name = "hymotion";
  f.build = [](ConfigTable& table) -> std::shared_ptr<UnitModule> {
    return std::make_shared<HyMotionModel>(HyMotionConfig::from_toml(table));
  };
  f.count_parameters = [](ConfigTable& table) { return count_parameters(HyMotionConfig::from_toml(table)); };
  f.forward = forward_named;
  f.training_loss = training_loss;
  return f;
}

}  // namespace zest::hymotion
