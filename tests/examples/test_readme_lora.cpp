// The README's LoRA section ("### LoRA: from pictures to a picture in a few commands"): its ```sh block,
// extracted from README.md when the test runs, run by bash as written on the tiny SD1.5 pipeline
// (tests/data/sd_tiny/sd15 in the block's weights/sd15) and a folder of pictures prepared by
// `zest data prepare images` (its datasets/mine): `zest train lora.toml` writes the LoRA file and
// `zest sample --lora` draws with it. The `zest` on bash's PATH only shrinks the run for a CPU.
#include "common/temp_dir.h"
#include "data/png_write.h"
#include "formats/safetensors.h"
#include "models/lora_file.h"
#include "readme_blocks.h"
#include "train/run_config.h"
#include "zest_run.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

const std::string kLoraHeading = "### LoRA: from pictures to a picture in a few commands";

TEST(ReadmeLora, ExtractsAShellBlockPastItsComments) {
  const std::string md = "### LoRA\ntext\n```sh\n# a comment, no heading\nzest train x\n```\n### Next\n```sh\nno\n```\n";
  EXPECT_EQ(fenced_block_under(md, "### LoRA", "sh"), "# a comment, no heading\nzest train x\n");
  EXPECT_EQ(fenced_block_under("### LoRA\ntext\n## Data\n```sh\nno\n```\n", "### LoRA", "sh"), "");
  EXPECT_EQ(fenced_block_under("### LoRA\n```toml\nx\n```\n```sh\ny\n```\n", "### LoRA", "sh"), "y\n");
  EXPECT_EQ(fenced_block_under(md, "### Missing", "sh"), "");
}

// The shell command of `block` that starts with `start`, its continuation lines joined (a comment at its end
// stays: bash ignores it); "" when there is none.
std::string readme_command(const std::string& block, const std::string& start) {
  const size_t at = ("\n" + block).find("\n" + start);
  if (at == std::string::npos) return "";
  std::string command;
  for (size_t i = at; i < block.size(); ++i) {
    if (block[i] == '\\' && i + 1 < block.size() && block[i + 1] == '\n') {
      ++i;
      continue;
    }
    if (block[i] == '\n') break;
    command += block[i];
  }
  return command;
}

std::string file_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Width and height from a PNG's IHDR chunk (bytes 16..23, big-endian).
std::pair<int, int> png_size(const std::string& png) {
  if (png.size() < 24) return {0, 0};
  auto at = [&](size_t i) {
    return (static_cast<uint8_t>(png[i]) << 24) | (static_cast<uint8_t>(png[i + 1]) << 16) |
           (static_cast<uint8_t>(png[i + 2]) << 8) | static_cast<uint8_t>(png[i + 3]);
  };
  return {static_cast<int>(at(16)), static_cast<int>(at(20))};
}

TEST(ReadmeLora, FromPicturesToAPictureAsWritten) {
  const std::string block = fenced_block_under(readme_markdown(), kLoraHeading, "sh");
  ASSERT_FALSE(block.empty()) << "README.md has no ```sh block under \"" << kLoraHeading << "\"";
  for (const char* step : {"cat > lora.toml", "zest train lora.toml", "zest sample "})
    ASSERT_NE(block.find(step), std::string::npos) << "the block lost its step \"" << step << "\":\n" << block;
  const std::string sample = readme_command(block, "zest sample ");
  const TempDir work("readme_lora");
  const fs::path dir = work.path();

  // The block's inputs: weights/sd15 (a pipeline folder) and datasets/mine, prepared from pictures/ of
  // a.png + a.txt pairs as the README's section on pictures prepares them.
  fs::create_directories(dir / "weights");
  fs::copy(std::string(ZEST_TEST_DATA) + "/sd_tiny/sd15", dir / "weights" / "sd15", fs::copy_options::recursive);
  torch::manual_seed(0);
  for (int i = 0; i < 6; ++i) {
    const std::string stem = (dir / "pictures" / ("picture" + std::to_string(i))).string();
    write_png(stem + ".png", torch::randint(0, 256, {20 + 2 * i, 24, 3}, torch::kUInt8));
    std::ofstream(stem + ".txt") << "a watercolor lighthouse number " << i << "\n";
  }
  const auto prepared = run_in(dir, zest_binary() + " data prepare images --pretrained weights/sd15 --images pictures "
                                                    "--out datasets/mine --resolution 16 --center-crop --random-flip");
  ASSERT_EQ(prepared.status, 0) << prepared.output;

  // `zest` for bash: the built binary; a run of 2 steps and pictures of 16x16 from 2 denoising steps (the
  // README's 1500 steps and 512x512 pictures are for real weights; every other option is the block's).
  fs::create_directories(dir / "bin");
  std::ofstream(dir / "bin" / "zest") << "#!/bin/sh\ncase \"$1\" in\n"
                                      << "  train) exec " << zest_binary() << " \"$@\" --set train.max_steps=2 ;;\n"
                                      << "  sample) exec " << zest_binary() << " \"$@\" --steps 2 --size 16x16 ;;\n"
                                      << "  *) exec " << zest_binary() << " \"$@\" ;;\nesac\n";
  fs::permissions(dir / "bin" / "zest", fs::perms::owner_all);
  std::ofstream(dir / "readme_lora.sh") << block;
  const std::string path = "PATH='" + (dir / "bin").string() + "':\"$PATH\" ";
  const auto ran = run_in(dir, path + "bash -e readme_lora.sh");
  ASSERT_EQ(ran.status, 0) << ran.output << "\n--- the block ---\n" << block;

  // The run trained only the adapters, and wrote them where the block samples them from.
  const RunConfig config = parse_run_config((dir / "lora.toml").string());
  ASSERT_TRUE(config.lora.enabled);
  const fs::path run_dir = dir / config.train.run_dir;
  const auto steps = logged_steps(run_dir / "metrics.jsonl");
  ASSERT_FALSE(steps.empty()) << ran.output;
  EXPECT_EQ(steps.back().step, 2);
  EXPECT_FALSE(fs::exists(run_dir / "model.safetensors")) << "a LoRA run writes its adapters, not a model";
  const safetensors::Reader lora((run_dir / kLoraFileName).string());
  ASSERT_FALSE(lora.tensors().empty());
  for (const auto& t : lora.tensors()) {
    EXPECT_EQ(t.name.rfind("unet.", 0), 0u) << t.name;
    EXPECT_NE(t.name.find(".lora_"), std::string::npos) << t.name;
  }
  EXPECT_EQ(nlohmann::json::parse(lora.metadata().at("lora_adapter_metadata")).at("unet.r"), config.lora.rank);

  // `zest sample` drew with the adapters: its line says so, and the 4 pictures are one 2×2 grid.
  EXPECT_NE(ran.output.find("LoRA runs/lora/pytorch_lora_weights.safetensors: "), std::string::npos) << ran.output;
  const std::string picture = file_text(dir / "lora.png");
  EXPECT_EQ(png_size(picture), (std::pair{32, 32})) << ran.output;

  // The block's comment: "--lora runs/lora/checkpoints works too" — the same command on the checkpoint draws
  // the same picture.
  std::string from_checkpoint = sample;
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"--lora runs/lora/pytorch_lora_weights.safetensors",
                                                                     "--lora runs/lora/checkpoints"},
                                 {"-o lora.png", "-o from_checkpoint.png"}}) {
    const size_t at = from_checkpoint.find(from);
    ASSERT_NE(at, std::string::npos) << "\"" << from << "\" is not in the README's command: " << sample;
    from_checkpoint.replace(at, from.size(), to);
  }
  const auto again = run_in(dir, path + from_checkpoint);
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_EQ(file_text(dir / "from_checkpoint.png"), picture);
}

}  // namespace
}  // namespace zest::testing
