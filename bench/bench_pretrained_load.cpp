// Peak host memory of starting from released weights: builds the model a diffusers folder describes and
// loads its weights the way `zest train` does (tensor by tensor into the parameters), reporting the
// model's own bytes and the process's peak RSS. A synthetic full-size folder (random weights) is written
// by a separate invocation, so the load's peak RSS is its own:
//   bench_pretrained_load write DIR NAMES.txt MODEL [fp16|bf16|fp32]   (NAMES.txt: "name<TAB>[d0, d1, ...]"
//                                      per line, e.g. tests/data/unet_sdxl_state_dict.txt; MODEL: unet_sdxl)
//   bench_pretrained_load load DIR                                     (prints sizes and peak RSS)
#include "formats/safetensors.h"
#include "core/check.h"
#include "formats/config_json.h"
#include "models/model_resolve.h"
#include "models/pretrained_load.h"
#include "models/unet/diffusers_config.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

using namespace zest;

double peak_rss_gib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / (1024.0 * 1024.0);  // Linux reports KiB
}

std::vector<safetensors::TensorDecl> read_names(const std::string& path, torch::Dtype dtype) {
  std::ifstream in(path);
  ZEST_CHECK(in.good(), "cannot read ", path);
  std::vector<safetensors::TensorDecl> decls;
  for (std::string line; std::getline(in, line);) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    std::vector<int64_t> shape;
    std::string dims = line.substr(tab + 1);
    for (char& c : dims)
      if (c == '[' || c == ']' || c == ',') c = ' ';
    std::istringstream numbers(dims);
    for (int64_t d = 0; numbers >> d;) shape.push_back(d);
    decls.push_back({line.substr(0, tab), dtype, shape});
  }
  return decls;
}

void write_folder(const std::string& dir, const std::string& names, const std::string& model_name, torch::Dtype dtype) {
  std::filesystem::create_directories(dir);
  ModelSelection selection;
  selection.name = model_name;
  const ResolvedModel model = resolve_model(selection);
  std::ofstream(dir + "/" + unet::kDiffusersConfigName)
      << unet::diffusers_config_json(toml_to_json(model.toml_text, model_name)).dump(2) << "\n";
  const auto decls = read_names(names, dtype);
  safetensors::Writer writer(dir + "/" + unet::kDiffusersWeightsName, decls, {{"format", "pt"}});
  int64_t numel = 0;
  for (const auto& decl : decls) {
    const torch::Tensor values = torch::randn(decl.shape) * 0.02;
    writer.append(values);
    numel += values.numel();
  }
  writer.finish();
  std::printf("wrote %s: %zu tensors, %lld parameters, %.2f GB on disk\n", dir.c_str(), decls.size(),
              static_cast<long long>(numel), writer.bytes_written() / 1e9);
}

void load_folder(const std::string& dir) {
  const auto start = std::chrono::steady_clock::now();
  const ResolvedModel resolved = resolve_pretrained_folder(dir);
  auto model = build_model(resolved);
  int64_t model_bytes = 0;
  for (const auto& p : model->parameters()) model_bytes += p.numel() * p.element_size();
  const double after_build = peak_rss_gib();
  const auto weights = PretrainedWeights::open(find_pretrained_layout(dir));
  const PretrainedReport report = load_pretrained_weights(*model, *weights, /*strict=*/true);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %lld tensors loaded (stored %s) into %s in %.1f s\n", dir.c_str(),
              static_cast<long long>(report.loaded), report.dtypes.empty() ? "-" : report.dtypes[0].c_str(),
              resolved.description.c_str(), seconds);
  std::printf("model parameters (fp32): %.2f GiB; peak RSS after building it: %.2f GiB; peak RSS after loading: "
              "%.2f GiB (load adds %.2f GiB)\n",
              model_bytes / 1073741824.0, after_build, peak_rss_gib(), peak_rss_gib() - after_build);
}

torch::Dtype parse(const std::string& name) {
  if (name == "fp16") return torch::kFloat16;
  if (name == "bf16") return torch::kBFloat16;
  return torch::kFloat32;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "write" && argc >= 5) {
      write_folder(argv[2], argv[3], argv[4], parse(argc > 5 ? argv[5] : "fp16"));
    } else if (mode == "load" && argc == 3) {
      load_folder(argv[2]);
    } else {
      std::fprintf(stderr, "usage: %s write DIR NAMES.txt MODEL [fp16|bf16|fp32] | load DIR\n", argv[0]);
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
