// [sample]'s field table (see sample_config.h).
#include "pipelines/sample_config.h"

#include "core/check.h"
#include "core/config_reader.h"
#include "core/config_writer.h"
#include "core/field_table.h"
#include "pipelines/sd_pipeline.h"

#include <algorithm>

namespace zest {

const FieldTable<SampleConfig>& sample_fields() {
  static const FieldTable<SampleConfig> table = [] {
    using C = SampleConfig;
    FieldTable<C> t("sample", "validation samples during training (PNG grids in RUN_DIR/samples/)",
                    {{"validation_prompt", "zest calls it prompts (a list)"},
                     {"validation_steps", "zest calls it every_steps"},
                     {"num_validation_images", "zest calls it num_images"},
                     {"guidance_scale", "zest calls it guidance"},
                     {"num_inference_steps", "zest calls it steps"}});
    t.integer("every_steps", &C::every_steps, "optimizer steps between samples (0: none)")
        .at_least(0, "must be >= 0 (0: no validation samples)");
    t.list("prompts", &C::prompts, "one grid per prompt")
        .check([](const C& c) { return c.every_steps == 0 || !c.prompts.empty(); },
               "needs at least one prompt when every_steps > 0")
        .check_value([](const std::vector<std::string>& prompts) {
          return std::none_of(prompts.begin(), prompts.end(), [](const std::string& p) { return p.empty(); });
        }, "an empty prompt; give the text to draw")
        .reference("the texts to draw (a list; at least one when `every_steps > 0`)");
    t.text("negative_prompt", &C::negative_prompt, "classifier-free guidance's unconditional prompt")
        .reference("classifier-free guidance's unconditional text (\"\" for SD1.5; SDXL then uses zeros, as its pipeline)");
    // Left out when unset: an empty path is not a valid value (the model's pretrained folder is then used).
    t.path("pretrained", &C::pretrained, "pipeline folder (default: the model's pretrained one)")
        .written_when([](const C& c) { return !c.pretrained.empty(); })
        .default_text("\"\"")
        .reference("the pipeline folder (`vae/ text_encoder/ tokenizer/`, SDXL also `text_encoder_2/ tokenizer_2/`); "
                   "\"\" = `model.pretrained`'s folder, or the pipeline above when it names a `unet/`");
    t.integer("steps", &C::steps, "denoising steps").between(1, 1000, "must be in [1, 1000]");
    t.number("guidance", &C::guidance, "classifier-free guidance scale")
        .check_value([](double g) { return g >= 1.0; }, "must be >= 1 (1: no classifier-free guidance)")
        .type("float ≥ 1")
        .reference("classifier-free guidance scale (1: off)");
    t.integer("seed", &C::seed, "seed of the starting noise (the same every time: grids compare across steps)")
        .at_least(0, "must be >= 0");
    t.text("size", &C::size, "WIDTHxHEIGHT in pixels")
        .check(
            [](const C& c) {
              try {
                parse_image_size(c.size);
                return true;
              } catch (const Error&) {
                return false;
              }
            },
            [](const C& c) { return "'" + c.size + "': expected WIDTHxHEIGHT in pixels, e.g. \"512x512\""; })
        .reference("WIDTHxHEIGHT in pixels (multiples of the pipeline's factor, 64 for SD1.5/SDXL)");
    t.integer("num_images", &C::num_images, "pictures per prompt")
        .between(1, 64, "must be in [1, 64]")
        .reference("pictures per prompt (one grid)");
    t.text("scheduler", &C::scheduler, "ddim | euler | dpmpp (\"\": the pipeline's own)")
        .check([](const C& c) { return c.scheduler.empty() || c.scheduler == "ddim" || c.scheduler == "euler" ||
                                       c.scheduler == "dpmpp"; },
               [](const C& c) {
                 return "'" + c.scheduler + "': expected \"ddim\", \"euler\" or \"dpmpp\" (or leave it out: the pipeline's own)";
               })
        .type("\"\" | ddim | euler | dpmpp")
        .reference("`ddim`, `euler` or `dpmpp`; \"\" = the pipeline's scheduler class when it is one of these, else DDIM");
    t.path("text_encoders", &C::text_encoders, "HY-Motion: the folder holding Qwen3-8B/ and clip-vit-large-patch14/")
        .written_when([](const C& c) { return !c.text_encoders.empty(); })
        .default_text("\"\"")
        .reference("HY-Motion runs: the folder holding `Qwen3-8B/` and `clip-vit-large-patch14/`; \"\" = the release's "
                   "`ckpts/` layout around the release folder");
    t.integer("frames", &C::frames, "HY-Motion: motion length in frames (30 fps)")
        .between(1, 100000, "must be in [1, 100000] (motion frames at 30 fps)")
        .reference("HY-Motion runs: motion length in frames (30 fps)");
    // Left out, HY-Motion's steps and guidance are the release's.
    t.rules([](ConfigTable& table, C& c) {
      c.steps_given = table.has("steps");
      c.guidance_given = table.has("guidance");
    });
    return t;
  }();
  return table;
}

SampleConfig SampleConfig::from_toml(ConfigTable& t) { return sample_fields().read(t); }

void to_toml(const SampleConfig& c, ConfigWriter& out) { sample_fields().write(c, out); }

}  // namespace zest
