// Reading and validating UNetConfig from diffusers' config fields; defaults are diffusers' defaults.
#include "models/unet/unet_config.h"

#include "core/check.h"

namespace zest::unet {

namespace {

const std::vector<std::string> kActNames{"silu", "swish", "mish", "gelu", "relu"};

Act to_act(const std::string& name) {
  if (name == "mish") return Act::mish;
  if (name == "gelu") return Act::gelu;
  if (name == "relu") return Act::relu;
  return Act::silu;  // "silu" and "swish"
}

std::optional<Act> optional_act(ConfigTable& t, const std::string& key) {
  if (!t.has(key)) return std::nullopt;
  return to_act(t.get_choice(key, "silu", kActNames));
}

// A field diffusers accepts as one integer or one integer per down block.
std::vector<int64_t> per_level(ConfigTable& t, const std::string& key, int64_t fallback, size_t levels) {
  if (!t.is_array(key)) return std::vector<int64_t>(levels, t.get<int64_t>(key, fallback));
  auto values = t.get<std::vector<int64_t>>(key, {});
  if (values.size() != levels) {
    t.fail(key, str("expected one value or ", levels, " values (one per down block), got ",
                    values.size()));
  }
  return values;
}

// Block types: "CrossAttn<kind>Block2D" → true, "<kind>Block2D" → false (diffusers strips "UNetRes").
std::vector<bool> block_types(ConfigTable& t, const std::string& key, const std::string& kind,
                              const std::vector<std::string>& fallback) {
  const auto cross = "CrossAttn" + kind + "Block2D";
  const auto plain = kind + "Block2D";
  std::vector<bool> is_cross;
  for (auto name : t.get<std::vector<std::string>>(key, fallback)) {
    if (name.rfind("UNetRes", 0) == 0) name = name.substr(7);
    if (name != cross && name != plain) {
      t.fail(key, str("block type \"", name, "\" is not supported; supported: ", cross, ", ", plain));
    }
    is_cross.push_back(name == cross);
  }
  return is_cross;
}

// Keys whose only supported value is diffusers' None, i.e. absence from the TOML table.
void refuse_if_present(ConfigTable& t, const std::string& key, const std::string& why) {
  if (t.has(key)) t.fail(key, "not supported by zest's UNet port (" + why + "); remove the key");
}

void refuse_if_true(ConfigTable& t, const std::string& key) {
  if (t.get<bool>(key, false)) t.fail(key, "only false is supported by zest's UNet port");
}

void read_unsupported_features(ConfigTable& t, size_t levels) {
  refuse_if_present(t, "reverse_transformer_layers_per_block", "asymmetric UNets");
  refuse_if_present(t, "encoder_hid_dim", "encoder_hidden_states projection");
  refuse_if_present(t, "encoder_hid_dim_type", "encoder_hidden_states projection");
  refuse_if_present(t, "num_attention_heads",
                    "diffusers itself rejects it; give the number of heads as attention_head_dim");
  refuse_if_present(t, "class_embed_type", "class embeddings");
  refuse_if_present(t, "num_class_embeds", "class embeddings");
  refuse_if_present(t, "time_cond_proj_dim", "timestep_cond");
  refuse_if_true(t, "dual_cross_attention");
  refuse_if_true(t, "class_embeddings_concat");
  if (t.is_array("only_cross_attention")) {
    const auto flags = t.get<std::vector<bool>>("only_cross_attention", {});
    for (const bool flag : flags) {
      if (flag) t.fail("only_cross_attention", "only false is supported by zest's UNet port");
    }
    if (flags.size() != levels) t.fail("only_cross_attention", str("expected ", levels, " values"));
  } else {
    refuse_if_true(t, "only_cross_attention");
  }
  t.get_choice("resnet_time_scale_shift", "default", {"default"});
  t.get_choice("time_embedding_type", "positional", {"positional"});
  t.get_choice("attention_type", "default", {"default"});
  t.get_choice("mid_block_type", "UNetMidBlock2DCrossAttn", {"UNetMidBlock2DCrossAttn"});
}

// Fields diffusers accepts but does not pass to the supported block types (so they change nothing),
// and the bookkeeping fields of config.json.
void read_inert_fields(ConfigTable& t) {
  for (const char* key : {"_class_name", "_diffusers_version", "_name_or_path"}) t.mark_known(key);
  if (t.is_array("sample_size")) {
    t.get<std::vector<int64_t>>("sample_size", {});
  } else {
    t.get<int64_t>("sample_size", 0);
  }
  t.get<bool>("resnet_skip_time_act", false);       // Resnet*/SimpleCrossAttn blocks only
  t.get<double>("resnet_out_scale_factor", 1.0);    // Resnet*/SimpleCrossAttn blocks only
  t.get<bool>("mid_block_only_cross_attention", false);  // UNetMidBlock2DSimpleCrossAttn only
  t.get_choice("cross_attention_norm", "layer_norm", {"layer_norm", "group_norm"});  // idem
  t.get<int64_t>("addition_embed_type_num_heads", 64);  // addition_embed_type "text" only
  // The SDPA attention processor diffusers uses by default ignores upcast_attention.
  t.get<bool>("upcast_attention", false);
}

// The largest sizes accepted, checked before anything is allocated: far above any released UNet (SDXL:
// 3 levels, 1280 channels, 10 transformer layers), small enough that a hostile config.json with
// layers_per_block = 1e9 is refused by name instead of building until memory runs out.
constexpr size_t kMaxLevels = 8;
constexpr int64_t kMaxLayersPerBlock = 64;
constexpr int64_t kMaxTransformerLayers = 128;
constexpr int64_t kMaxWidth = 65536;  // channels, attention and embedding widths
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxKernel = 31;

void check_at_most(ConfigTable& t, const std::string& key, int64_t value, int64_t largest) {
  if (value > largest) t.fail(key, str("is ", value, "; the largest value zest accepts is ", largest));
}

void check_each_at_most(ConfigTable& t, const std::string& key, const std::vector<int64_t>& values, int64_t largest) {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] > largest)
      t.fail(key, str("[", i, "] is ", values[i], "; the largest value zest accepts is ", largest));
}

void check_sizes(ConfigTable& t, const UNetConfig& c) {
  if (c.down_cross_attention.size() > kMaxLevels)
    t.fail("down_block_types", str("has ", c.down_cross_attention.size(), " blocks; at most ", kMaxLevels,
                                   " are accepted"));
  check_each_at_most(t, "block_out_channels", c.block_out_channels, kMaxWidth);
  check_each_at_most(t, "layers_per_block", c.layers_per_block, kMaxLayersPerBlock);
  check_each_at_most(t, "transformer_layers_per_block", c.transformer_layers_per_block, kMaxTransformerLayers);
  check_each_at_most(t, "attention_head_dim", c.num_heads, kMaxHeads);
  check_each_at_most(t, "cross_attention_dim", c.cross_attention_dim, kMaxWidth);
  check_at_most(t, "in_channels", c.in_channels, kMaxWidth);
  check_at_most(t, "out_channels", c.out_channels, kMaxWidth);
  check_at_most(t, "norm_num_groups", c.norm_num_groups, kMaxWidth);
  check_at_most(t, "conv_in_kernel", c.conv_in_kernel, kMaxKernel);
  check_at_most(t, "conv_out_kernel", c.conv_out_kernel, kMaxKernel);
  check_at_most(t, "downsample_padding", c.downsample_padding, kMaxKernel);
  check_at_most(t, "time_embedding_dim", c.time_embedding_dim, kMaxWidth);
  check_at_most(t, "addition_time_embed_dim", c.addition_time_embed_dim, kMaxWidth);
  check_at_most(t, "projection_class_embeddings_input_dim", c.projection_class_embeddings_input_dim, 16 * kMaxWidth);
}

void read_time_embedding(ConfigTable& t, UNetConfig& c) {
  c.flip_sin_to_cos = t.get<bool>("flip_sin_to_cos", true);
  c.freq_shift = t.get<double>("freq_shift", 0.0);
  c.time_embedding_dim = t.get<int64_t>("time_embedding_dim", 0);
  c.timestep_post_act = optional_act(t, "timestep_post_act");
  c.time_embedding_act_fn = optional_act(t, "time_embedding_act_fn");
  if (t.has("addition_embed_type")) {
    t.get_choice("addition_embed_type", "text_time", {"text_time"});
    c.text_time_embedding = true;
    c.addition_time_embed_dim = t.required<int64_t>("addition_time_embed_dim");
    c.projection_class_embeddings_input_dim =
        t.required<int64_t>("projection_class_embeddings_input_dim");
  } else {
    // Without an add embedding diffusers ignores these two.
    t.get<int64_t>("addition_time_embed_dim", 0);
    t.get<int64_t>("projection_class_embeddings_input_dim", 0);
  }
}

}  // namespace

UNetConfig UNetConfig::from_toml(ConfigTable& t) {
  UNetConfig c;
  c.in_channels = t.get<int64_t>("in_channels", 4);
  c.out_channels = t.get<int64_t>("out_channels", 4);
  c.center_input_sample = t.get<bool>("center_input_sample", false);
  c.down_cross_attention =
      block_types(t, "down_block_types", "Down",
                  {"CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"});
  c.up_cross_attention =
      block_types(t, "up_block_types", "Up",
                  {"UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"});
  c.block_out_channels = t.get<std::vector<int64_t>>("block_out_channels", c.block_out_channels);
  const size_t levels = c.down_cross_attention.size();
  if (c.up_cross_attention.size() != levels) {
    t.fail("up_block_types", str("expected as many up blocks as down_block_types (", levels, ")"));
  }
  if (c.block_out_channels.size() != levels) {
    t.fail("block_out_channels", str("expected one entry per down block (", levels, ")"));
  }
  c.layers_per_block = per_level(t, "layers_per_block", 2, levels);
  c.transformer_layers_per_block = per_level(t, "transformer_layers_per_block", 1, levels);
  c.num_heads = per_level(t, "attention_head_dim", 8, levels);
  c.cross_attention_dim = per_level(t, "cross_attention_dim", 1280, levels);
  c.use_linear_projection = t.get<bool>("use_linear_projection", false);
  c.norm_num_groups = t.get<int64_t>("norm_num_groups", 32);
  c.norm_eps = t.get<double>("norm_eps", 1e-5);
  c.act_fn = to_act(t.get_choice("act_fn", "silu", kActNames));
  c.dropout = t.get<double>("dropout", 0.0);
  c.downsample_padding = t.get<int64_t>("downsample_padding", 1);
  c.mid_block_scale_factor = t.get<double>("mid_block_scale_factor", 1.0);
  c.conv_in_kernel = t.get<int64_t>("conv_in_kernel", 3);
  c.conv_out_kernel = t.get<int64_t>("conv_out_kernel", 3);
  read_time_embedding(t, c);
  read_unsupported_features(t, levels);
  read_inert_fields(t);
  t.reject_unknown_keys();
  check_sizes(t, c);
  try {
    c.validate();
  } catch (const Error& e) {
    t.fail_table(e.what());
  }
  return c;
}

void UNetConfig::validate() const {
  ZEST_CHECK(levels() > 0, "block_out_channels: at least one level is needed");
  const size_t n = levels();
  for (const auto* list : {&layers_per_block, &transformer_layers_per_block, &num_heads,
                           &cross_attention_dim}) {
    ZEST_CHECK(list->size() == n, "UNet config: every per-level list needs ", n, " entries");
  }
  ZEST_CHECK(down_cross_attention.size() == n && up_cross_attention.size() == n,
             "down_block_types/up_block_types: expected ", n, " entries each");
  ZEST_CHECK(in_channels > 0 && out_channels > 0, "in_channels/out_channels must be positive");
  ZEST_CHECK(norm_num_groups > 0, "norm_num_groups must be positive");
  for (size_t i = 0; i < n; ++i) {
    const int64_t channels = block_out_channels[i];
    ZEST_CHECK(channels > 0 && channels % norm_num_groups == 0, "block_out_channels[", i, "] = ",
               channels, " must be a positive multiple of norm_num_groups (", norm_num_groups, ")");
    ZEST_CHECK(layers_per_block[i] > 0, "layers_per_block[", i, "] must be positive");
    ZEST_CHECK(num_heads[i] > 0 && channels % num_heads[i] == 0, "attention_head_dim[", i, "] = ",
               num_heads[i], " (the number of heads) must divide block_out_channels[", i, "] = ",
               channels);
    ZEST_CHECK(transformer_layers_per_block[i] > 0, "transformer_layers_per_block[", i,
               "] must be positive");
    ZEST_CHECK(cross_attention_dim[i] > 0, "cross_attention_dim[", i, "] must be positive");
  }
  ZEST_CHECK(conv_in_kernel % 2 == 1 && conv_out_kernel % 2 == 1,
             "conv_in_kernel/conv_out_kernel must be odd (padding (k-1)/2 keeps the size)");
  ZEST_CHECK(downsample_padding >= 0, "downsample_padding must be >= 0");
  ZEST_CHECK(dropout >= 0.0 && dropout < 1.0, "dropout must be in [0, 1)");
  if (text_time_embedding) {
    ZEST_CHECK(addition_time_embed_dim > 0 && addition_time_embed_dim % 2 == 0,
               "addition_time_embed_dim must be a positive even number");
    ZEST_CHECK(projection_class_embeddings_input_dim > 6 * addition_time_embed_dim,
               "projection_class_embeddings_input_dim (", projection_class_embeddings_input_dim,
               ") must exceed 6 · addition_time_embed_dim (", 6 * addition_time_embed_dim,
               "): it is text_embeds width + 6 · addition_time_embed_dim");
  }
}

}  // namespace zest::unet
