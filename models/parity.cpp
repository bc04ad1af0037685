// The parity check of a model port against a golden file (see parity.h).
#include "models/parity.h"

#include "core/check.h"
#include "core/config_reader.h"
#include "formats/safetensors.h"
#include "models/model_memory.h"
#include "models/registry.h"
#include "models/state_dict.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace zest {
namespace {

std::string sci(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", value);
  return text;
}

// Max abs difference of `actual` against a golden tensor; +inf (with a note) when the shapes differ.
struct Comparison {
  std::string key;
  double max_abs_err = 0.0;
  std::string note;
  double scale = 0.0;  // max |golden|
};

Comparison compare(const std::string& key, const torch::Tensor& actual, const torch::Tensor& golden) {
  Comparison c{key, std::numeric_limits<double>::infinity(), "", 0.0};
  if (actual.sizes() != golden.sizes()) {
    c.note = " (shape " + c10::str(actual.sizes()) + " but golden " + c10::str(golden.sizes()) + ")";
    return c;
  }
  if (actual.numel() == 0) {
    c.max_abs_err = 0.0;
    return c;
  }
  const torch::Tensor diff = actual.detach().to(torch::kCPU, torch::kFloat64) - golden.to(torch::kFloat64);
  c.max_abs_err = diff.abs().max().item<double>();  // NaN propagates and fails the tolerance test
  c.scale = golden.to(torch::kFloat64).abs().max().item<double>();
  return c;
}

bool within(double err, double atol) { return err <= atol; }  // false for NaN

double grad_allowance(const Comparison& g, const ParityOptions& opt) { return opt.atol_grad + opt.rtol_grad * g.scale; }
// How much of its tolerance a gradient uses (> 1 fails; NaN for NaN errors).
double grad_ratio(const Comparison& g, const ParityOptions& opt) { return g.max_abs_err / grad_allowance(g, opt); }

// The one golden output tensor: the output.* key other than output.loss.
std::string output_key(const safetensors::Reader& golden) {
  std::vector<std::string> keys;
  for (const auto& info : golden.tensors()) {
    if (info.name.rfind("output.", 0) == 0 && info.name != "output.loss") keys.push_back(info.name);
  }
  ZEST_CHECK(keys.size() == 1, golden.path(),
             ": expected exactly one output.* tensor besides output.loss, found ", keys.size());
  return keys.front();
}

TensorMap golden_inputs(const safetensors::Reader& golden) {
  TensorMap inputs;
  for (const auto& info : golden.tensors()) {
    if (info.name.rfind("input.", 0) == 0) inputs[info.name.substr(6)] = golden.read(info.name);
  }
  ZEST_CHECK(!inputs.empty(), golden.path(), ": no input.* tensors");
  return inputs;
}

// Compares every parameter's gradient with grad.<name>; a parameter without a gradient counts as zero.
// Golden keys that are absent are collected in `missing`.
std::vector<Comparison> compare_grads(const UnitModule& model, const safetensors::Reader& golden,
                                      std::vector<std::string>& missing) {
  std::vector<Comparison> grads;
  for (const auto& param : model.named_parameters()) {
    const std::string key = "grad." + param.key();
    if (!golden.contains(key)) {
      missing.push_back(key);
      continue;
    }
    const torch::Tensor& grad = param.value().grad();
    grads.push_back(compare(key, grad.defined() ? grad : torch::zeros_like(param.value()), golden.read(key)));
  }
  return grads;
}

struct ParityResult {
  Comparison output;
  Comparison loss;
  double loss_value = 0.0;
  double golden_loss = 0.0;
  std::vector<Comparison> grads;
  std::vector<std::string> missing;  // golden gradients absent from the file
};

// Builds the model, loads param.* strictly, runs input.* forward, loss = mean(out²), backward.
ParityResult compute_parity(const ParityOptions& opt) {
  const ModelFamily& family = model_family(opt.family);
  ConfigTable counted = ConfigTable::parse_file(opt.config_path);
  check_model_fits_host(family, counted);  // before the first weight is allocated
  ConfigTable config = ConfigTable::parse_file(opt.config_path);
  const std::shared_ptr<UnitModule> model = family.build(config);
  config.reject_unknown_keys();
  const safetensors::Reader golden(opt.golden_path);
  LoadOptions load;
  load.prefix = "param.";
  const LoadReport loaded = load_state_dict(*model, golden, load);
  std::cout << "parity " << opt.family << ": config " << opt.config_path << ", golden " << opt.golden_path
            << " (" << loaded.loaded.size() << " tensors loaded from param.*)\n";

  model->train();  // as the golden files were made (with every dropout probability 0)
  const torch::Tensor out = family.forward(*model, golden_inputs(golden));
  const torch::Tensor loss = out.pow(2).mean();
  loss.backward();

  ParityResult result;
  const std::string out_key = output_key(golden);
  result.output = compare(out_key, out, golden.read(out_key));
  const torch::Tensor golden_loss = golden.read("output.loss");
  result.loss = compare("output.loss", loss.reshape({1}), golden_loss);
  result.loss_value = loss.item<double>();
  result.golden_loss = golden_loss.to(torch::kFloat64).sum().item<double>();
  result.grads = compare_grads(*model, golden, result.missing);
  return result;
}

// Prints every comparison, the worst gradient and the one-line summary last; returns whether it passed.
bool report_parity(const ParityResult& r, const ParityOptions& opt) {
  std::cout << "  " << r.output.key << "  max abs err " << sci(r.output.max_abs_err) << r.output.note
            << "\n  output.loss  " << std::setprecision(9) << r.loss_value << " vs golden " << r.golden_loss
            << "  abs err "
            << sci(r.loss.max_abs_err) << "\n";
  const Comparison* worst = nullptr;
  for (const Comparison& g : r.grads) {
    std::cout << "  " << g.key << "  max abs err " << sci(g.max_abs_err) << " of max |golden| " << sci(g.scale)
              << g.note << "\n";
    if (!worst || !(grad_ratio(g, opt) <= grad_ratio(*worst, opt))) worst = &g;  // NaN counts as worst
  }
  for (const std::string& key : r.missing) std::cout << "  " << key << "  MISSING in the golden file\n";
  if (worst) {
    std::cout << "  worst gradient: " << worst->key << " (max abs err " << sci(worst->max_abs_err) << ", allowed "
              << sci(grad_allowance(*worst, opt)) << ")\n";
  }

  const bool out_ok = within(r.output.max_abs_err, opt.atol_out);
  const bool loss_ok = within(r.loss.max_abs_err, opt.atol_out);
  const bool grads_ok = r.missing.empty() && (!worst || within(worst->max_abs_err, grad_allowance(*worst, opt)));
  const bool pass = out_ok && loss_ok && grads_ok;
  std::cout << (pass ? "PASS" : "FAIL") << " parity " << opt.family << ": output " << sci(r.output.max_abs_err)
            << (out_ok ? " <= " : " > ") << sci(opt.atol_out) << ", loss " << sci(r.loss.max_abs_err)
            << (loss_ok ? " <= " : " > ") << sci(opt.atol_out) << ", " << r.grads.size() << " grads, worst ";
  if (!worst) std::cout << "n/a";
  if (worst) {
    const double allowed = grad_allowance(*worst, opt);
    std::cout << sci(worst->max_abs_err) << (within(worst->max_abs_err, allowed) ? " <= " : " > ") << sci(allowed)
              << " (" << worst->key << ")";
  }
  if (!r.missing.empty()) std::cout << ", " << r.missing.size() << " golden gradients missing";
  std::cout << std::endl;
  return pass;
}

}  // namespace

bool check_parity(const ParityOptions& opt) { return report_parity(compute_parity(opt), opt); }

}  // namespace zest
