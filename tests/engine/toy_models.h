// Small multi-unit models for engine tests: odd parameter counts (not divisible by any world size), a
// parameter that never receives a gradient, and a parameter tied between two modules.
#pragma once

#include "engine/unit_module.h"

#include <torch/torch.h>

namespace zest::testing {

// embed: Linear(7→13) whose weight is tied with head.proj (used transposed);
// blocks.{0,1}: Linear(13→13) + LayerNorm(13) + GELU, residual;
// head: Linear(13→5) and `unused` (in the head unit, never used in forward).
class ToyNet : public UnitModule {
 public:
  explicit ToyNet(int64_t seed) {
    torch::manual_seed(seed);
    embed = register_module("embed", torch::nn::Linear(7, 13));
    for (int i = 0; i < 2; ++i) {
      auto block = std::make_shared<torch::nn::Module>();
      lin.push_back(block->register_module("lin", torch::nn::Linear(13, 13)));
      norm.push_back(block->register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({13}))));
      blocks.push_back(block);
    }
    blocks_list = register_module("blocks", torch::nn::ModuleList());
    for (auto& b : blocks) blocks_list->push_back(b);
    head = register_module("head", torch::nn::Linear(13, 5));
    head_extra = std::make_shared<torch::nn::Module>();
    register_module("head_extra", head_extra);
    // Tied: the same tensor registered under head_extra.tied (shared with embed.weight).
    head_extra->register_parameter("tied", embed->weight);
    // Never used: gets no gradient. Named as no-decay (see README: a parameter without a gradient
    // still receives weight decay inside a flat buffer, unlike per-tensor PyTorch AdamW).
    head_extra->register_parameter("unused_bias", torch::randn({3, 3}));
  }

  std::vector<UnitDecl> unit_decls() const override {
    return {{"embed", {"embed."}},
            {"blocks.0", {"blocks.0."}},
            {"blocks.1", {"blocks.1."}},
            {"head", {"head.", "head_extra."}}};
  }

  torch::Tensor forward(const torch::Tensor& x_in) {
    const auto dtype = embed->weight.scalar_type();
    auto x = x_in.to(dtype);
    auto h = run_unit("embed", [&](const Tensors& in) { return Tensors{embed->forward(in[0])}; }, {x})[0];
    for (int i = 0; i < 2; ++i) {
      const std::string name = "blocks." + std::to_string(i);
      h = run_unit(name, [&, i](const Tensors& in) {
            return Tensors{in[0] + torch::gelu(norm[i]->forward(lin[i]->forward(in[0])))};
          }, {h})[0];
    }
    return run_unit("head", [&](const Tensors& in) {
             // The tied weight is used a second time here: [13,7] → project back onto 7 dims.
             auto back = torch::matmul(in[0], head_extra->named_parameters(false)["tied"]);
             return Tensors{head->forward(in[0]).sum(-1, true) + back.mean(-1, true)};
           }, {h})[0];
  }

  torch::nn::Linear embed{nullptr}, head{nullptr};
  std::vector<torch::nn::Linear> lin;
  std::vector<torch::nn::LayerNorm> norm;
  std::vector<std::shared_ptr<torch::nn::Module>> blocks;
  torch::nn::ModuleList blocks_list{nullptr};
  std::shared_ptr<torch::nn::Module> head_extra;
};

// Elementwise-only model (works in fp16 on CPU with LibTorch 1.13): y = Σ_j x_j · w_ij + b_i.
class ElementwiseNet : public UnitModule {
 public:
  explicit ElementwiseNet(int64_t seed) {
    torch::manual_seed(seed);
    w1 = register_parameter("w1", torch::randn({5, 6}) * 0.3);
    b1 = register_parameter("b1", torch::zeros({5}));
    w2 = register_parameter("w2", torch::randn({5}) * 0.3);
  }
  std::vector<UnitDecl> unit_decls() const override { return {{"first", {"w1", "b1"}}, {"second", {"w2"}}}; }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = (x.to(w1.scalar_type()).unsqueeze(1) * w1).sum(-1) + b1;  // [B, 5]
    return (h * w2).sum(-1);                                           // [B]
  }
  torch::Tensor w1, b1, w2;
};

// Global batch for step `step`: inputs [G, 7] and targets [G, 1] (a learnable function of the input).
inline std::pair<torch::Tensor, torch::Tensor> toy_batch(int64_t step, int64_t global_batch) {
  auto gen = at::detail::createCPUGenerator(1000 + step);
  auto x = at::randn({global_batch, 7}, gen);
  auto y = (x.narrow(1, 0, 3).sum(1, true) * 0.5 - x.narrow(1, 3, 2).prod(1, true)).tanh();
  return {x, y};
}

}  // namespace zest::testing
