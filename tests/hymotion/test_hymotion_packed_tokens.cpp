// HY-Motion over packed valid tokens (models/hymotion/packed_tokens.h): the index tensors of an irregular
// mask, the packing made ahead of the step (rounded up to a bucket with padded rows), and the training loss
// and every parameter's gradient equal to the padded computation's either way.
#include "hymotion_test_util.h"

#include "common/scoped_switch.h"
#include "engine/activation_checkpoint.h"
#include "models/hymotion/packed_tokens.h"

#include <algorithm>

namespace zest::hymotion::test {
namespace {

using zest::testing::ScopedSwitch;

std::vector<int64_t> values(const torch::Tensor& t) {
  const auto c = t.to(torch::kCPU).to(torch::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

TEST(HyMotionPackedTokens, IndicesOfAnIrregularMask) {
  const auto x_valid = torch::tensor({1, 0, 1, 1, 0, 1, 0, 0}).view({2, 4}).to(torch::kBool);
  const auto ctxt_valid = torch::tensor({1, 1, 0, 0, 0, 1}).view({2, 3}).to(torch::kBool);
  const PackedTokens p = pack_tokens(x_valid, ctxt_valid);
  EXPECT_EQ(p.joint_len(), 7);
  EXPECT_EQ(values(p.motion_rows), (std::vector<int64_t>{0, 2, 3, 5}));
  EXPECT_EQ(values(p.text_rows), (std::vector<int64_t>{0, 1, 5}));
  EXPECT_EQ(values(p.joint_rows), (std::vector<int64_t>{0, 2, 3, 4, 5, 8, 13}));
  EXPECT_EQ(values(p.streams_in_joint), (std::vector<int64_t>{0, 2, 3, 8, 4, 5, 13}));
  EXPECT_EQ(values(p.joint_from_streams), (std::vector<int64_t>{0, 1, 2, 4, 5, 3, 6}));
  EXPECT_EQ(values(p.motion_of_joint), (std::vector<int64_t>{0, 1, 2, 5}));
  EXPECT_EQ(values(p.motion.starts), (std::vector<int64_t>{0, 3, 4}));
  EXPECT_EQ(values(p.text.starts), (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(values(p.joint.starts), (std::vector<int64_t>{0, 5, 7}));
  EXPECT_EQ(values(p.joint.sample), (std::vector<int64_t>{0, 0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(p.motion.starts.scalar_type(), torch::kInt);
  EXPECT_EQ(p.motion.longest, 3);
  EXPECT_EQ(p.text.longest, 2);
  EXPECT_EQ(p.joint.longest, 5);
}

struct LossAndGrads {
  double loss = 0.0;
  std::map<std::string, torch::Tensor> grads;
};

// The loss at fixed flow times and noise over masks with padded frames and tokens (sample 1's frames not a
// prefix), and every parameter's gradient.
LossAndGrads loss_and_grads(HyMotionModel& model, const HyMotionInputs& in,
                            std::shared_ptr<const PackedTokens> packed = nullptr) {
  model.zero_grad();
  const auto t = torch::tensor({0.3f, 0.7f});
  torch::manual_seed(11);
  const auto noise = torch::randn(in.x.sizes());
  const auto loss = flow_matching_loss_at(model, in.x, in.ctxt_input, in.vtxt_input, in.x_mask_temporal,
                                          in.ctxt_mask_temporal, t, noise, std::move(packed));
  loss.backward();
  LossAndGrads out;
  out.loss = loss.item<double>();
  for (const auto& p : model.named_parameters()) out.grads[p.key()] = p.value().grad().clone();
  return out;
}

TEST(HyMotionPackedTokens, LossAndGradientsEqualThePaddedOnes) {
  const Golden golden = Golden::load();
  auto model = golden_model(golden);  // non-zero gates: tokens interact through attention
  auto in = golden.inputs();
  auto x_valid = torch::ones(in.x_mask_temporal.sizes(), torch::kBool);
  x_valid[1].narrow(0, 4, 2).fill_(false);  // a hole inside sample 1's frames
  x_valid[1].narrow(0, 10, 2).fill_(false);
  x_valid[1][0] = false;  // 19 of 24 frames: the packing made ahead keeps 20, one of them padded
  auto ctxt_valid = torch::ones(in.ctxt_mask_temporal.sizes(), torch::kBool);
  ctxt_valid[0].narrow(0, ctxt_valid.size(1) - 2, 2).fill_(false);
  in.x_mask_temporal = x_valid;
  in.ctxt_mask_temporal = ctxt_valid;

  std::map<std::string, torch::Tensor> batch{{"x_mask_temporal", x_valid}, {"ctxt_mask_temporal", ctxt_valid}};
  add_packed_tokens(batch);
  const auto ahead = packed_tokens_of(batch);
  ASSERT_NE(ahead, nullptr);
  ASSERT_EQ(ahead->motion_rows.size(0), 20);
  ASSERT_FALSE(x_valid.flatten()[values(ahead->motion_rows)[12]].item<bool>());  // a padded frame is kept

  LossAndGrads packed, packed_ahead, padded;
  {
    const ScopedSwitch on(packed_tokens_enabled, set_packed_tokens, true);
    packed = loss_and_grads(*model, in);
    packed_ahead = loss_and_grads(*model, in, ahead);
  }
  {
    const ScopedSwitch off(packed_tokens_enabled, set_packed_tokens, false);
    padded = loss_and_grads(*model, in);
  }
  for (const LossAndGrads* got : {&packed, &packed_ahead}) {
    SCOPED_TRACE(got == &packed ? "packed in the step" : "packed ahead, a padded frame kept");
    EXPECT_NEAR(got->loss, padded.loss, 1e-6 * std::abs(padded.loss));
    ASSERT_EQ(got->grads.size(), padded.grads.size());
    int nonzero = 0;
    for (const auto& [name, g] : padded.grads) {
      const double scale = g.abs().max().item<double>();
      nonzero += scale > 0.0;
      const double diff = (got->grads.at(name) - g).abs().max().item<double>();
      EXPECT_LE(diff, 1e-5 * scale + 1e-9) << name << ": packed gradient differs by " << diff << " (largest " << scale
                                           << ")";
    }
    EXPECT_GT(nonzero, static_cast<int>(padded.grads.size()) / 2);
  }
}

// Made ahead of the step, each count is rounded up to a sixteenth of the padded rows with the first padded
// rows in row order, every valid row kept; a batch without the entries has no packing.
TEST(HyMotionPackedTokens, MadeAheadTheCountsRoundUpToABucket) {
  auto x_valid = torch::zeros({4, 40}, torch::kBool);  // buckets of 10 frames
  for (int64_t b = 0; b < 4; ++b) x_valid[b].narrow(0, 0, 3 + 5 * b).fill_(true);  // 3 + 8 + 13 + 18 = 42
  auto ctxt_valid = torch::ones({4, 8}, torch::kBool);  // buckets of 2 tokens: 32 of 32
  std::map<std::string, torch::Tensor> batch{{"x_mask_temporal", x_valid}, {"ctxt_mask_temporal", ctxt_valid}};
  EXPECT_EQ(packed_tokens_of(batch), nullptr);
  add_packed_tokens(batch);
  EXPECT_EQ(batch.size(), 14u);
  const auto p = packed_tokens_of(batch);
  ASSERT_NE(p, nullptr);
  const auto kept = values(p->motion_rows);
  ASSERT_EQ(kept.size(), 50u);
  const auto valid = values(x_valid.flatten().nonzero().squeeze(1));
  EXPECT_TRUE(std::includes(kept.begin(), kept.end(), valid.begin(), valid.end()));
  EXPECT_EQ(std::vector<int64_t>(kept.begin(), kept.begin() + 11),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));  // sample 0's first 8 padded frames kept
  EXPECT_EQ(values(p->motion.starts), (std::vector<int64_t>{0, 11, 19, 32, 50}));
  EXPECT_EQ(p->text_rows.size(0), 32);
  EXPECT_EQ(p->motion.longest, 40);  // the padded lengths: a captured step cannot read the real ones
  EXPECT_EQ(p->joint.longest, 48);
}

// Every unit recomputed in backward: the packing the forward made is what the recompute reads (the units'
// lambdas hold it), so the gradients are bitwise those of the kept activations.
TEST(HyMotionPackedTokens, RecomputedUnitsGiveTheSameGradients) {
  const Golden golden = Golden::load();
  auto model = golden_model(golden);
  auto in = golden.inputs();
  in.ctxt_mask_temporal[1][0] = false;  // a hole at the start of sample 1's text
  const ScopedSwitch on(packed_tokens_enabled, set_packed_tokens, true);
  const LossAndGrads kept = loss_and_grads(*model, in);
  std::vector<std::string> units;
  for (const UnitDecl& decl : model->unit_decls()) units.push_back(decl.name);
  model->set_unit_runner(std::make_shared<CheckpointRunner>(CheckpointPolicy::all, 2, units));
  const LossAndGrads recomputed = loss_and_grads(*model, in);
  model->set_unit_runner(nullptr);
  EXPECT_EQ(recomputed.loss, kept.loss);
  for (const auto& [name, g] : kept.grads) {
    const bool feeds_every_block = name.rfind("timestep_encoder.", 0) == 0 || name.rfind("vtxt_encoder.", 0) == 0;
    if (!feeds_every_block) {
      EXPECT_TRUE(recomputed.grads.at(name).equal(g)) << name;
      continue;
    }
    // The adapter's gradient sums every block's part, in another order when the blocks are recomputed (the
    // padded computation's too): equal up to that rounding.
    const double diff = (recomputed.grads.at(name) - g).abs().max().item<double>();
    EXPECT_LE(diff, 1e-6 * g.abs().max().item<double>() + 1e-12) << name;
  }
}

}  // namespace
}  // namespace zest::hymotion::test
