// The kernel switches' list, their [engine.kernels] table and the process-wide registry (see kernel_switches.h).
#include "core/kernel_switches.h"

#include "core/check.h"
#include "core/field_table.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace zest {

const std::vector<KernelSwitchSpec>& kernel_switch_specs() {
  static const std::vector<KernelSwitchSpec> specs = {
      {"linear_grad_fusion", "ZEST_LINEAR_GRAD_FUSION", "true", {},
       "CUDA: Linear layers add their weight and bias gradients into the engine's slots",
       "CUDA: Linear layers add their weight and bias gradients into the engine's gradient slots in the backward "
       "product (cuBLAS, beta = 1) instead of returning them; false also turns off what is built on it "
       "(joined_linear, split_linear, the pointwise convolutions). docs/models.md, \"Fused paths\""},
      {"joined_linear", "ZEST_JOINED_LINEAR", "true", {},
       "CUDA: HY-Motion's linear2 over [attention | GELU] as two products, no concatenation",
       "CUDA: HY-Motion's single-block `linear2` over `[attention | GELU_tanh(MLP half)]` runs as two products "
       "over the weight's column blocks, the concatenation never written; false: the concatenation and one "
       "product"},
      {"split_linear", "ZEST_SPLIT_LINEAR", "true", {},
       "CUDA: HY-Motion's linear1 as two products, [q | k | v] and the MLP half",
       "CUDA: HY-Motion's single-block `linear1` runs as two products, `[q | k | v]` and the MLP half, each "
       "part contiguous and the gradients added into the slots' row ranges; false: one product and a split"},
      {"shared_input_linear", "ZEST_SHARED_INPUT_LINEAR", "true", {},
       "CUDA: Linear layers reading one input (a UNet self-attention's q, k, v) add their input gradients together",
       "CUDA: Linear layers reading one input (the UNet self-attentions' `to_q`, `to_k`, `to_v`) run as one "
       "autograd function whose backward adds every layer's input gradient into one buffer (cuBLAS, beta = 1), "
       "where autograd writes each and adds them in passes of their own; false: the layers one by one"},
      {"residual_epilogue", "ZEST_RESIDUAL_EPILOGUE", "true", {},
       "CUDA: a Linear's output is added to its residual stream in the product (cuBLASLt's C and bias epilogue)",
       "CUDA: where a Linear's output joins its residual stream (the UNet transformer blocks' attention outputs, "
       "the Transformer2D's proj_out, a resnet's 1×1 shortcut), one cuBLASLt product reads the residual as its C "
       "and adds the bias in its epilogue, so the sum is no pass of its own; false: the product, then an add"},
      {"gelu_epilogue", "ZEST_GELU_EPILOGUE", "true", {},
       "CUDA: GELU_tanh between two products in cuBLASLt's epilogues (GELU_AUX_BIAS, DGELU)",
       "CUDA: where HY-Motion's GELU_tanh sits between two products, the first writes GELU and its input "
       "together and the backward product writes the gradient through GELU's derivative (cuBLASLt's "
       "`GELU_AUX_BIAS` and `DGELU` epilogues); false: the products and ATen's GELU"},
      {"conv_grad_fusion", "ZEST_CONV_GRAD_FUSION", "false", {},
       "CUDA: k×k convolutions over channels-last activations add their gradients into the slots",
       "CUDA: k×k convolutions over channels-last 16-bit activations keep a channels-last weight copy and add "
       "their weight and bias gradients into the slots; off by default (the same speed on an H200, 1.0 GiB more "
       "peak memory for SD1.5 at 32 × 64²)"},
      {"layer_norm_kernels", "ZEST_LAYER_NORM_KERNELS", "true", {},
       "CUDA: the UNet's affine layer norms run as zest's row kernels, one pass each way",
       "CUDA: the UNet transformer blocks' affine layer norms run as zest's row kernels (HY-Motion's modulated "
       "layer norm with the weight as the multiplier): backward makes the input's, weight's and bias's gradients "
       "in one pass over the input and its gradient, where LibTorch's layer norm reads both twice; false: "
       "LibTorch's layer norm (reported like a fallback in `fused_paths`)"},
      {"qk_norm_rope", "ZEST_QK_NORM_ROPE", "true", {},
       "CUDA: HY-Motion's q/k RMSNorm + RoPE + stream join in one kernel each way",
       "CUDA: HY-Motion's q/k RMSNorm, RoPE and the stream join run as one kernel each way; false: the op chain "
       "(reported like a fallback in `fused_paths`)"},
      {"block_sparse_attention", "ZEST_BLOCK_SPARSE_ATTENTION", "false", {},
       "CUDA: attention over a bias in 64 × 64 tiles, skipping tiles the bias closes whole (HY-Motion's mask)",
       "CUDA: HY-Motion's attention (bf16/fp16 with a bias, head dims multiples of 8 up to 128) runs as zest's "
       "kernels over 64 × 64 tiles, skipping the tiles its bias closes whole; off by default (HY-Motion 1B at "
       "the release: 155.6 ms a step against 142.7 with LibTorch's cuDNN attention on an H100); false: LibTorch's "
       "scaled_dot_product_attention"},
      {"packed_tokens", "ZEST_PACKED_TOKENS", "true", {},
       "HY-Motion's training loss runs the blocks over the valid tokens only, padding dropped",
       "HY-Motion's training loss runs the blocks over each batch's valid motion frames and text tokens only, "
       "packed one sample after another: every per-token product and norm skips the padding, and only the "
       "attention works in the padded layout (its inputs scattered there, its output gathered back). The "
       "result is the padded computation's up to rounding (padded tokens reach nothing the loss sees). The "
       "indices are made on the host ahead of the step, each count rounded up to a sixteenth of the padded "
       "rows, so the step reads nothing on the host and is captured as a CUDA graph per count. false: every "
       "token, padded or not, as the reference computes it"},
      {"sdpa_backend", "ZEST_SDPA_BACKEND", "auto", {"auto", "cudnn", "efficient", "flash", "math"},
       "CUDA: the fused attention LibTorch may use (auto: LibTorch chooses)",
       "CUDA: the one fused attention LibTorch's scaled_dot_product_attention may choose, for benchmarks and "
       "diagnosis; `auto` leaves LibTorch's choice as it is (`flash` takes no attention bias: HY-Motion refuses it)"},
  };
  return specs;
}

KernelsConfig::KernelsConfig() : KernelsConfig(kernel_switch_specs()) {}

KernelsConfig::KernelsConfig(const std::vector<KernelSwitchSpec>& specs) {
  for (const KernelSwitchSpec& s : specs) {
    if (s.is_on_off()) on[s.key] = s.default_value == "true";
    else choice[s.key] = s.default_value;
  }
}

namespace {

// The environment variable's value; nullopt when unset or empty.
std::optional<std::string> variable_value(const KernelSwitchSpec& spec) {
  const char* value = std::getenv(spec.variable.c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int choice_index(const KernelSwitchSpec& spec, const std::string& value) {
  const auto at = std::find(spec.choices.begin(), spec.choices.end(), value);
  return at == spec.choices.end() ? -1 : static_cast<int>(at - spec.choices.begin());
}

// An on/off variable: "0" off, anything else on (as the variables always read).
int variable_index(const KernelSwitchSpec& spec, const std::string& value) {
  if (spec.is_on_off()) return value == "0" ? 0 : 1;
  return choice_index(spec, value);
}

int default_index(const KernelSwitchSpec& spec) {
  return spec.is_on_off() ? (spec.default_value == "true" ? 1 : 0) : choice_index(spec, spec.default_value);
}

std::string choices_text(const std::vector<std::string>& choices) {
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i)
    out += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  return out;
}

// The docs' text of a switch: its reference, then the variable that overrides it.
std::string reference_of(const KernelSwitchSpec& s) {
  return (s.reference.empty() ? s.doc : s.reference) + " (`" + s.variable + "` overrides)";
}

std::unique_ptr<FieldTable<KernelsConfig>> make_fields(const std::vector<KernelSwitchSpec>& specs) {
  std::map<std::string, std::string> hints;
  for (const KernelSwitchSpec& s : specs) hints[s.variable] = "the variable " + s.variable + " is the key " + s.key;
  auto t = std::make_unique<FieldTable<KernelsConfig>>(
      "kernels", "kernel switches (environment variables, where set, override them)", hints);
  for (const KernelSwitchSpec& s : specs) {
    const std::string key = s.key;
    if (s.is_on_off()) {
      t->value<bool>(
           key, [key](const KernelsConfig& k) { return k.on.count(key) ? k.on.at(key) : false; },
           [key](KernelsConfig& k, bool v) { k.on[key] = v; }, s.doc)
          .default_text(s.default_value)
          .reference(reference_of(s));
    } else {
      t->choice(
           key, [key](const KernelsConfig& k) { return k.choice.count(key) ? k.choice.at(key) : std::string(); },
           [key](KernelsConfig& k, std::string v) { k.choice[key] = std::move(v); }, s.choices, s.doc)
          .default_text(s.default_value)
          .reference(reference_of(s));
    }
  }
  return t;
}

}  // namespace

KernelSwitch::KernelSwitch(const KernelSwitchSpec& spec) : spec_(spec), value_(default_index(spec)) {
  ZEST_CHECK(value_.load() >= 0, "kernel switch ", spec.key, ": default '", spec.default_value, "' is not one of its choices");
  if (const std::optional<std::string> v = variable_value(spec)) {
    const int index = variable_index(spec, *v);
    if (index >= 0) value_.store(index);  // an invalid value is refused where a run applies its config
  }
}

bool KernelSwitch::enabled() const {
  ZEST_CHECK(spec_.is_on_off(), "kernel switch ", spec_.key, " is a choice, not on/off");
  return value_.load(std::memory_order_relaxed) != 0;
}

void KernelSwitch::set(bool on) {
  ZEST_CHECK(spec_.is_on_off(), "kernel switch ", spec_.key, " is a choice, not on/off");
  value_.store(on ? 1 : 0);
}

std::string KernelSwitch::value() const {
  const int index = value_.load();
  if (spec_.is_on_off()) return index != 0 ? "true" : "false";
  return spec_.choices.at(static_cast<size_t>(index));
}

void KernelSwitch::set_value(const std::string& value) {
  const int index = spec_.is_on_off() ? (value == "true" ? 1 : value == "false" ? 0 : -1) : choice_index(spec_, value);
  ZEST_CHECK(index >= 0, "kernel switch ", spec_.key, ": '", value, "' is not one of ",
             spec_.is_on_off() ? "true or false" : choices_text(spec_.choices));
  value_.store(index);
}

KernelSwitches::KernelSwitches(std::vector<KernelSwitchSpec> specs, std::string table)
    : specs_(std::move(specs)), table_(std::move(table)) {
  for (const KernelSwitchSpec& s : specs_) switches_.emplace_back(s);
  fields_ = make_fields(specs_);
}

KernelSwitches::~KernelSwitches() = default;

KernelSwitches& KernelSwitches::process() {
  static KernelSwitches switches(kernel_switch_specs(), "engine.kernels");
  return switches;
}

KernelSwitch& KernelSwitches::at(std::string_view key) {
  for (KernelSwitch& s : switches_)
    if (s.spec().key == key) return s;
  ZEST_FAIL("no kernel switch '", std::string(key), "' in [", table_, "]");
}

KernelsConfig KernelSwitches::current() const {
  KernelsConfig c(specs_);
  for (const KernelSwitch& s : switches_) {
    if (s.spec().is_on_off()) c.on[s.spec().key] = s.enabled();
    else c.choice[s.spec().key] = s.value();
  }
  return c;
}

KernelsConfig KernelSwitches::apply(const KernelsConfig& config, std::vector<std::string>* overrides) {
  for (KernelSwitch& s : switches_) {
    const KernelSwitchSpec& spec = s.spec();
    const std::string configured = spec.is_on_off() ? (config.on.count(spec.key) && config.on.at(spec.key) ? "true" : "false")
                                                    : (config.choice.count(spec.key) ? config.choice.at(spec.key)
                                                                                     : spec.default_value);
    std::string value = configured;
    if (const std::optional<std::string> v = variable_value(spec)) {
      const int index = variable_index(spec, *v);
      if (index < 0)
        throw Error(spec.variable + " must be " + choices_text(spec.choices) + ", got '" + *v + "' (it overrides [" +
                    table_ + "] " + spec.key + ")");
      value = spec.is_on_off() ? (index != 0 ? "true" : "false") : spec.choices[static_cast<size_t>(index)];
      if (value != configured && overrides != nullptr) {
        const std::string shown = spec.is_on_off() ? configured : "\"" + configured + "\"";
        overrides->push_back(spec.variable + "=" + *v + " overrides [" + table_ + "] " + spec.key + " = " + shown);
      }
    }
    s.set_value(value);
  }
  return current();
}

KernelSwitch& kernel_switch(std::string_view key) { return KernelSwitches::process().at(key); }

const FieldTable<KernelsConfig>& kernels_fields() { return KernelSwitches::process().fields(); }

}  // namespace zest
