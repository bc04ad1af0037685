// The [sample] table: validation samples during training (what to draw, how, with which pipeline folder),
// read and written through its field table (core/field_table.h); what draws them is the family's
// (pipelines/family_pipeline.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zest {

class ConfigTable;
class ConfigWriter;

struct SampleConfig {
  int64_t every_steps = 0;           // 0: no validation samples
  std::vector<std::string> prompts;  // one grid per prompt
  std::string negative_prompt;       // "" (SD1.5's unconditional input; SDXL: zeros, as its pipeline)
  std::string pretrained;            // pipeline folder; "" = [model] pretrained's (the folder, or above its unet/)
  int64_t steps = 30;
  double guidance = 7.5;
  int64_t seed = 0;
  std::string size = "512x512";      // WIDTHxHEIGHT
  int64_t num_images = 4;            // per prompt, one grid
  std::string scheduler;             // ddim | euler | dpmpp; "" = the pipeline's own
  // HY-Motion runs (motions from the prompts, models/hy_text): where Qwen3-8B/ and clip-vit-large-patch14/ are
  // ("" = the release's ckpts/ layout) and the motion length. steps and guidance, when the run file leaves
  // them out, are the release's (50 Euler steps, its text_guidance_scale).
  std::string text_encoders;
  int64_t frames = 180;
  bool steps_given = false, guidance_given = false;

  static SampleConfig from_toml(ConfigTable& table);
};

void to_toml(const SampleConfig& config, ConfigWriter& out);
template <typename C>
class FieldTable;
const FieldTable<SampleConfig>& sample_fields();  // the [sample] table (core/field_table.h)

}  // namespace zest
