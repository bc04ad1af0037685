// `zest sample`'s work (see sample_run.h).
#include "pipelines/sample_run.h"

#include "core/check.h"
#include "models/lora_file.h"
#include "pipelines/family_pipeline.h"

#include <torch/cuda.h>

#include <cstdio>
#include <string>

namespace zest {

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

torch::Device sample_device(const std::string& name) {
  if (name == "auto") return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  try {
    return torch::Device(name);
  } catch (const std::exception&) {
    ZEST_FAIL("--device '", name, "': expected auto, cpu, cuda or cuda:N");
  }
}

torch::Dtype sample_dtype(const std::string& name, const torch::Device& device, torch::Dtype gpu_auto) {
  if (name == "auto") return device.is_cuda() ? gpu_auto : torch::kFloat32;
  if (name == "fp32") return torch::kFloat32;
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kHalf;
  ZEST_FAIL("--dtype '", name, "': expected auto, fp32, bf16 or fp16");
}

void add_lora(torch::nn::Module& network, const std::string& family, const SampleOptions& args) {
  if (args.lora.empty()) return;
  const LoadedLora loaded = load_lora(network, family, args.lora, args.lora_scale);
  std::printf("LoRA %s: %lld layers, rank %lld, alpha %g, scale %g\n", args.lora.c_str(),
              static_cast<long long>(loaded.layers), static_cast<long long>(loaded.rank), loaded.alpha, args.lora_scale);
}

void run_sample(const SampleOptions& args) {
  ZEST_CHECK(!args.weights.ema || !args.weights.checkpoint.empty(), "--ema needs --checkpoint");
  ZEST_CHECK((args.lora_scale == 1.0 && !args.lora_scale_given) || !args.lora.empty(), "--lora-scale needs --lora");
  family_pipeline_for_folder(args.pretrained).sample(args);
}

}  // namespace zest
