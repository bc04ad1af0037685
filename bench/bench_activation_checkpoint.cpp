// Benchmark: peak process memory (VmHWM) and step time of one forward+backward through a stack of
// transformer blocks, without and with activation checkpointing, each variant in a fresh process.
//
//   bench_activation_checkpoint [--blocks 8] [--width 512] [--heads 8] [--seq 512] [--batch 8]
// runs the variants none / every_2 / all as child processes (--policy P runs one variant).
#include "engine/activation_checkpoint.h"
#include "core/check.h"
#include "core/compat.h"

#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

namespace {

struct BenchOptions {
  int64_t blocks = 8, width = 512, heads = 8, seq = 512, batch = 8;
  std::string policy;  // empty: parent mode, runs every policy in a child process
};

// A standard pre-norm transformer block: multi-head self-attention and a 4x GELU MLP.
struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t width, int64_t heads) : heads(heads) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
    qkv = register_module("qkv", torch::nn::Linear(width, 3 * width));
    proj = register_module("proj", torch::nn::Linear(width, width));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
    fc1 = register_module("fc1", torch::nn::Linear(width, 4 * width));
    fc2 = register_module("fc2", torch::nn::Linear(4 * width, width));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), s = x.size(1), w = x.size(2);
    auto qkv_out = qkv->forward(ln1->forward(x)).view({b, s, 3, heads, w / heads}).permute({2, 0, 3, 1, 4});
    auto attn = zest::compat::scaled_dot_product_attention(qkv_out[0], qkv_out[1], qkv_out[2]);
    auto h = x + proj->forward(attn.transpose(1, 2).reshape({b, s, w}));
    return h + fc2->forward(torch::gelu(fc1->forward(ln2->forward(h))));
  }
  int64_t heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Block);

class Stack : public zest::UnitModule {
 public:
  Stack(int64_t blocks, int64_t width, int64_t heads) {
    blocks_ = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < blocks; ++i) blocks_->push_back(Block(width, heads));
  }
  std::vector<zest::UnitDecl> unit_decls() const override {
    std::vector<zest::UnitDecl> decls;
    for (size_t i = 0; i < blocks_->size(); ++i) {
      decls.push_back({"blocks." + std::to_string(i), {"blocks." + std::to_string(i) + "."}});
    }
    return decls;
  }
  torch::Tensor forward(torch::Tensor x) {
    for (size_t i = 0; i < blocks_->size(); ++i) {
      auto block = blocks_[i]->as<BlockImpl>();
      x = run_unit("blocks." + std::to_string(i),
                   [block](const zest::Tensors& in) { return zest::Tensors{block->forward(in[0])}; }, {x})[0];
    }
    return x;
  }

 private:
  torch::nn::ModuleList blocks_{nullptr};
};

// Peak resident set size of this process so far, in MiB (Linux /proc/self/status VmHWM).
double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  ZEST_FAIL("VmHWM not found in /proc/self/status");
}

zest::CheckpointPolicy parse_policy(const std::string& name, int& every) {
  if (name == "none") return zest::CheckpointPolicy::none;
  if (name == "all") return zest::CheckpointPolicy::all;
  if (name.rfind("every_", 0) == 0) {
    every = std::stoi(name.substr(6));
    return zest::CheckpointPolicy::every_k;
  }
  ZEST_FAIL("unknown --policy '", name, "' (expected none, all or every_K)");
}

// One variant: builds the stack, records the peak RSS before the step, runs forward+backward once.
void run_variant(const BenchOptions& opt) {
  torch::manual_seed(0);
  auto model = std::make_shared<Stack>(opt.blocks, opt.width, opt.heads);
  int every = 2;
  const zest::CheckpointPolicy policy = parse_policy(opt.policy, every);
  std::vector<std::string> names;
  for (const auto& decl : model->unit_decls()) names.push_back(decl.name);
  if (policy != zest::CheckpointPolicy::none) {
    model->set_unit_runner(std::make_shared<zest::CheckpointRunner>(policy, every, names));
  }
  const torch::Tensor x = torch::randn({opt.batch, opt.seq, opt.width});
  for (auto& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);  // grads count in the base
  const double base_mib = peak_rss_mib();

  const auto start = std::chrono::steady_clock::now();
  const torch::Tensor loss = model->forward(x).pow(2).mean();
  loss.backward();
  const double step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const double peak_mib = peak_rss_mib();

  double grad_sq = 0.0;
  for (const auto& p : model->parameters()) grad_sq += p.grad().pow(2).sum().item<double>();
  std::printf("%-9s %12.0f %12.0f %16.0f %10.0f   loss %.9g  grad-norm %.9g\n", opt.policy.c_str(),
              base_mib, peak_mib, peak_mib - base_mib, step_ms, loss.item<double>(), std::sqrt(grad_sq));
  std::fflush(stdout);
}

BenchOptions parse_args(int argc, char** argv) {
  BenchOptions opt;
  const std::map<std::string, int64_t*> ints{{"--blocks", &opt.blocks}, {"--width", &opt.width},
                                             {"--heads", &opt.heads},   {"--seq", &opt.seq},
                                             {"--batch", &opt.batch}};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    ZEST_CHECK(i + 1 < argc, "option ", arg, " needs a value");
    if (arg == "--policy") {
      opt.policy = argv[++i];
    } else if (ints.count(arg)) {
      *ints.at(arg) = std::stoll(argv[++i]);
    } else {
      ZEST_FAIL("unknown option ", arg);
    }
  }
  return opt;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const BenchOptions opt = parse_args(argc, argv);
    if (!opt.policy.empty()) {
      run_variant(opt);
      return 0;
    }
    std::string command = argv[0];
    for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
    std::printf("command: %s\n", command.c_str());
    std::printf("%lld transformer blocks, width %lld, %lld heads, seq %lld, batch %lld, fp32 CPU, %d threads\n",
                static_cast<long long>(opt.blocks), static_cast<long long>(opt.width),
                static_cast<long long>(opt.heads), static_cast<long long>(opt.seq),
                static_cast<long long>(opt.batch), torch::get_num_threads());
    std::printf("%-9s %12s %12s %16s %10s\n", "policy", "base MiB", "peak MiB", "peak-base MiB", "step ms");
    std::fflush(stdout);
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    for (const char* policy : {"none", "every_2", "all"}) {
      // A fresh process per variant: VmHWM only ever grows.
      const std::string child = self + " --policy " + policy + " --blocks " + std::to_string(opt.blocks) +
                                " --width " + std::to_string(opt.width) + " --heads " +
                                std::to_string(opt.heads) + " --seq " + std::to_string(opt.seq) +
                                " --batch " + std::to_string(opt.batch);
      ZEST_CHECK(std::system(child.c_str()) == 0, "variant failed: ", child);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_activation_checkpoint: error: %s\n", e.what());
    return 1;
  }
}
