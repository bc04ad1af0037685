// Reading HyMotionConfig from TOML: defaults are the reference constructor's code defaults
// (hymotion_mmdit.py, token_refiner.py, encoders.py); options the port does not implement are refused.
#include "models/hymotion/hymotion_config.h"

#include "core/check.h"

#include <cmath>

namespace zest::hymotion {
namespace {

const std::vector<std::string> kActNames = {"gelu", "gelu_tanh", "relu", "silu"};
const std::vector<std::string> kQkNormNames = {"rms", "layer", "none"};
const std::string kRefinerModule = "hymotion/network/token_refiner.SingleTokenRefiner";
const std::string kFinalLayerModule = "hymotion/network/encoders.FinalLayer";

std::string to_text(bool v) { return v ? "true" : "false"; }
std::string to_text(double v) { return str(v); }
std::string to_text(const std::string& v) { return "\"" + v + "\""; }

// A key whose only supported value is `expected` (the port implements just that branch).
template <typename T>
void require_value(ConfigTable& t, const std::string& key, const T& expected, const std::string& why) {
  const T value = t.get<T>(key, expected);
  if (value != expected)
    t.fail(key, str("unsupported value ", to_text(value), "; the port supports only ", to_text(expected), " (",
                    why, ")"));
}

int64_t positive(ConfigTable& t, const std::string& key, int64_t fallback) {
  const int64_t v = t.get<int64_t>(key, fallback);
  if (v <= 0) t.fail(key, str("must be a positive integer, got ", v));
  return v;
}

// The largest sizes accepted, checked before anything is allocated: far above HY-Motion 1.0 (27 layers,
// width 2048), small enough that a hostile config.yml with num_layers: 999999999 is refused by name.
constexpr int64_t kMaxLayers = 999;
constexpr int64_t kMaxRefinerLayers = 64;
constexpr int64_t kMaxWidth = 65536;  // feature, text and motion widths
constexpr int64_t kMaxHeads = 4096;
constexpr double kMaxMlpRatio = 64.0;

void check_at_most(ConfigTable& t, const std::string& key, int64_t value, int64_t largest) {
  if (value > largest) t.fail(key, str("is ", value, "; the largest value zest accepts is ", largest));
}

void check_at_most(ConfigTable& t, const std::string& key, double value, double largest) {
  if (!(value <= largest)) t.fail(key, str("is ", value, "; the largest value zest accepts is ", largest));
}

// text_refiner_module + text_refiner_cfg. A given table replaces the reference's default dict
// {num_layers: 2} entirely, so num_layers is then required (as SingleTokenRefiner requires it).
RefinerConfig read_refiner(ConfigTable& t) {
  RefinerConfig r;
  const std::string module = t.get_choice("text_refiner_module", kRefinerModule, {kRefinerModule, ""});
  r.enabled = !module.empty();
  if (!t.has("text_refiner_cfg")) return r;
  t.mark_known("text_refiner_cfg");
  ConfigTable cfg = t.table("text_refiner_cfg");
  if (!r.enabled) {  // the reference ignores the table without a refiner
    for (const auto& key : cfg.keys()) cfg.mark_known(key);
    return r;
  }
  r.num_layers = cfg.required<int64_t>("num_layers");
  if (r.num_layers < 0) cfg.fail("num_layers", "must be >= 0");
  check_at_most(cfg, "num_layers", r.num_layers, kMaxRefinerLayers);
  r.mlp_ratio = cfg.get<double>("mlp_ratio", 4.0);
  check_at_most(cfg, "mlp_ratio", r.mlp_ratio, kMaxMlpRatio);
  r.mlp_act = parse_act(cfg.get_choice("mlp_act_type", "silu", kActNames));
  r.qk_norm = parse_qk_norm(cfg.get_choice("qk_norm_type", "layer", kQkNormNames));
  r.qkv_bias = cfg.get<bool>("qkv_bias", true);
  require_value<double>(cfg, "dropout", 0.0, "dropout is not implemented");
  require_value<std::string>(cfg, "attn_mode", "torch", "the reference asserts it too");
  cfg.reject_unknown_keys();
  return r;
}

// final_layer_module + final_layer_cfg. A given table replaces the default {act_type: silu}, and then
// FinalLayer's own default act_type "gelu" applies.
FinalLayerConfig read_final_layer(ConfigTable& t) {
  FinalLayerConfig f;
  t.get_choice("final_layer_module", kFinalLayerModule, {kFinalLayerModule});
  if (!t.has("final_layer_cfg")) return f;
  t.mark_known("final_layer_cfg");
  ConfigTable cfg = t.table("final_layer_cfg");
  f.act = parse_act(cfg.get_choice("act_type", "gelu", kActNames));
  f.zero_init = cfg.get<bool>("zero_init", false);
  cfg.reject_unknown_keys();
  return f;
}

MaskMode read_mask_mode(ConfigTable& t) {
  const std::string mode = t.get_choice("mask_mode", "none", {"none", "causal", "narrowband"});
  if (mode == "causal") return MaskMode::causal;
  if (mode == "narrowband") return MaskMode::narrowband;
  return MaskMode::none;
}

}  // namespace

Act parse_act(const std::string& name) {
  if (name == "gelu") return Act::gelu;
  if (name == "gelu_tanh") return Act::gelu_tanh;
  if (name == "relu") return Act::relu;
  if (name == "silu") return Act::silu;
  ZEST_FAIL("unknown activation '", name, "' (allowed: gelu, gelu_tanh, relu, silu)");
}

QkNorm parse_qk_norm(const std::string& name) {
  if (name == "rms") return QkNorm::rms;
  if (name == "layer") return QkNorm::layer;
  if (name == "none") return QkNorm::none;
  ZEST_FAIL("unknown qk norm '", name, "' (allowed: rms, layer, none)");
}

int64_t HyMotionConfig::narrowband_window() const {
  return static_cast<int64_t>(std::nearbyint(narrowband_length * 30.0));
}

HyMotionConfig HyMotionConfig::from_toml(ConfigTable& t) {
  HyMotionConfig c;
  c.input_dim = t.required<int64_t>("input_dim");
  c.feat_dim = t.required<int64_t>("feat_dim");
  c.output_dim = t.get<int64_t>("output_dim", c.input_dim);
  c.ctxt_input_dim = positive(t, "ctxt_input_dim", 4096);
  c.vtxt_input_dim = positive(t, "vtxt_input_dim", 256);
  c.refiner = read_refiner(t);
  c.num_layers = t.get<int64_t>("num_layers", 12);
  c.num_heads = positive(t, "num_heads", 16);
  c.mlp_ratio = t.get<double>("mlp_ratio", 4.0);
  c.mlp_act = parse_act(t.get_choice("mlp_act_type", "gelu_tanh", kActNames));
  // The reference accepts norm_type but its blocks always use LayerNorm.
  t.get_choice("norm_type", "layer", {"layer"});
  c.qk_norm = parse_qk_norm(t.get_choice("qk_norm_type", "rms", kQkNormNames));
  c.qkv_bias = t.get<bool>("qkv_bias", true);
  require_value<double>(t, "dropout", 0.0, "dropout is not implemented");
  c.final_layer = read_final_layer(t);
  c.mask_mode = read_mask_mode(t);
  c.apply_rope_to_single_branch = t.get<bool>("apply_rope_to_single_branch", true);
  require_value<bool>(t, "insert_start_token", false, "start token not implemented");
  require_value<bool>(t, "with_long_skip_connection", false, "long skip connection not implemented");
  c.time_factor = t.get<double>("time_factor", 1.0);
  c.narrowband_length = t.get<double>("narrowband_length", 2.0);
  if (!(c.narrowband_length >= 0.0 && c.narrowband_length <= 3600.0))
    t.fail("narrowband_length", str("is ", c.narrowband_length, " seconds; accepted: 0 to 3600"));
  t.reject_unknown_keys();

  // Errors at the offending key, with the file location; sizes first, before any arithmetic on them.
  check_at_most(t, "num_layers", c.num_layers, kMaxLayers);
  check_at_most(t, "num_heads", c.num_heads, kMaxHeads);
  check_at_most(t, "mlp_ratio", c.mlp_ratio, kMaxMlpRatio);
  const std::pair<const char*, int64_t> widths[] = {{"input_dim", c.input_dim}, {"feat_dim", c.feat_dim},
                                                     {"output_dim", c.output_dim}, {"ctxt_input_dim", c.ctxt_input_dim},
                                                     {"vtxt_input_dim", c.vtxt_input_dim}};
  for (const auto& [key, value] : widths) check_at_most(t, key, value, kMaxWidth);
  if (c.input_dim <= 0) t.fail("input_dim", "must be positive");
  if (c.feat_dim <= 0) t.fail("feat_dim", "must be positive");
  if (c.output_dim <= 0) t.fail("output_dim", "must be positive");
  if (c.feat_dim % c.num_heads != 0) t.fail("num_heads", str("must divide feat_dim ", c.feat_dim));
  if (c.head_dim() % 2 != 0) t.fail("num_heads", "head dim feat_dim/num_heads must be even (RoPE pairs)");
  if (c.num_layers <= 0 || c.num_layers % 3 != 0)
    t.fail("num_layers", str("must be a positive multiple of 3, got ", c.num_layers));
  if (c.mlp_hidden() <= 0) t.fail("mlp_ratio", "int(feat_dim * mlp_ratio) must be positive");
  c.validate();
  return c;
}

void HyMotionConfig::validate() const {
  ZEST_CHECK(input_dim > 0 && feat_dim > 0 && output_dim > 0 && ctxt_input_dim > 0 && vtxt_input_dim > 0,
             "HyMotionConfig: input_dim, feat_dim, output_dim, ctxt_input_dim, vtxt_input_dim must be positive");
  ZEST_CHECK(num_heads > 0 && feat_dim % num_heads == 0, "HyMotionConfig: num_heads ", num_heads,
             " must divide feat_dim ", feat_dim);
  ZEST_CHECK(head_dim() % 2 == 0, "HyMotionConfig: head dim ", head_dim(), " must be even for RoPE");
  ZEST_CHECK(num_layers > 0 && num_layers % 3 == 0, "HyMotionConfig: num_layers ", num_layers,
             " must be a positive multiple of 3");
  ZEST_CHECK(mlp_hidden() > 0, "HyMotionConfig: int(feat_dim * mlp_ratio) must be positive");
  ZEST_CHECK(!refiner.enabled || refiner_mlp_hidden() > 0,
             "HyMotionConfig: text_refiner_cfg.mlp_ratio gives an empty MLP");
}

}  // namespace zest::hymotion
