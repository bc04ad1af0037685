// Fine-tuning end to end through the CLI with the shipped run files (configs/*_finetune.toml, pointed at
// tiny generated folders with --set): released folder → 2-rank `zest train` → `zest merge --format` →
// the export loads as `pretrained` again with identical tensors, its config file is the one read in
// (fields zest does not use carried through), a release's pipeline tensors come back bit for bit, and
// PyTorch reads the files. A resumed fine-tune never reads the base weights again. The shipped configs
// keep an EMA ([ema]): merge_at_end writes model_ema.safetensors beside model.safetensors, `zest merge
// --ema --format ...` exports exactly it, and a resumed run ends with the uninterrupted run's EMA.
#include "common/temp_dir.h"
#include "finetune_test_util.h"
#include "launch/launch_test_util.h"
#include "models/pretrained_source.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

std::string run_ok(const std::vector<std::string>& argv) {
  Child child(argv);
  const int status = child.finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << child.output();
  return child.output();
}

std::string config_file(const std::string& name) { return std::string(ZEST_SOURCE_DIR) + "/configs/" + name; }

// `zest launch -n 2 -- zest train CONFIG --set ...` with the tiny data and a short run.
std::string train(const std::string& config, const std::string& base, const fs::path& data, const fs::path& run,
                  int steps, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {zest_binary(), "launch", "-n", "2", "--", zest_binary(), "train", config_file(config)};
  for (const std::string& set :
       {"model.pretrained=\"" + base + "\"", "data.dir=\"" + data.string() + "\"", std::string("data.batch_size=2"),
        std::string("data.num_workers=1"), "train.max_steps=" + std::to_string(steps), std::string("train.log_every=1"),
        "train.run_dir=\"" + run.string() + "\"", std::string("scheduler.warmup_steps=1"),
        std::string("checkpoint.every_steps=2")}) {
    argv.push_back("--set");
    argv.push_back(set);
  }
  for (const std::string& set : extra) {
    argv.push_back("--set");
    argv.push_back(set);
  }
  return run_ok(argv);
}

// The model built from `folder` as a pretrained source, loaded strictly, by name.
Named load_as_pretrained(const std::string& folder) {
  const ResolvedModel resolved = resolve_pretrained_folder(folder);
  auto model = build_model(resolved);
  load_pretrained_weights(*model, *PretrainedWeights::open(find_pretrained_layout(folder)), /*strict=*/true);
  return named_tensors(*model);
}

void expect_identical(const Named& actual, const Named& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (const auto& [name, value] : expected) {
    ASSERT_TRUE(actual.count(name)) << what << ": " << name << " missing";
    EXPECT_TRUE(actual.at(name).equal(value)) << what << ": " << name << " differs";
  }
}

// Fine-tuning moved the weights a little from the released ones, not back to a random initialisation.
void expect_started_from(const Named& trained, const Named& base) {
  double moved = 0.0, farthest = 0.0;
  for (const auto& [name, value] : base) {
    const double d = (trained.at(name) - value).abs().max().item<double>();
    moved = std::max(moved, d);
    farthest = std::max(farthest, d);
  }
  EXPECT_GT(moved, 0.0) << "training changed nothing";
  EXPECT_LT(farthest, 1e-3) << "the run did not start from the pretrained weights";
}

// The HY-Motion port cannot run bf16 yet (its timestep embedding stays fp32 in front of a bf16 Linear,
// "mat1 and mat2 must have the same dtype"), so its fine-tune runs here in fp32.
std::vector<std::string> hymotion_sets() { return {"data.seq_len=12", "engine.precision=\"fp32\""}; }

bool python_has(const std::string& module) {
  return std::system(("/usr/bin/python3 -c 'import " + module + "' > /dev/null 2>&1").c_str()) == 0;
}

int python(const TempDir& dir, const std::string& script, const std::string& args) {
  std::ofstream(dir.file("check.py")) << script;
  return std::system(("/usr/bin/python3 " + dir.file("check.py") + " " + args + " > " + dir.file("py.log") + " 2>&1").c_str());
}

// What diffusers' from_pretrained reads, checked with Python's json and the safetensors layout read by
// hand: config.json, the index's weight_map and total_size, and each shard's header.
void expect_python_reads_diffusers_folder(const TempDir& work, const std::string& folder) {
  if (std::system("/usr/bin/python3 -c 'import json' > /dev/null 2>&1") != 0) return;
  const int rc = python(work, R"PY(
import json, os, struct, sys
folder = sys.argv[1]
config = json.load(open(os.path.join(folder, "config.json")))
assert config["_class_name"] == "UNet2DConditionModel" and config["some_future_field"] == {"kept": True}, config
index = json.load(open(os.path.join(folder, "diffusion_pytorch_model.safetensors.index.json")))
total, seen = 0, set()
for shard in sorted(set(index["weight_map"].values())):
    with open(os.path.join(folder, shard), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        size = len(f.read())
    assert header["__metadata__"]["format"] == "pt"
    ends = []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert index["weight_map"][name] == shard, name
        assert e["dtype"] == "F32", e
        b, end = e["data_offsets"]
        assert end - b == 4 * eval("*".join(map(str, e["shape"])) or "1"), name
        total += end - b
        ends.append(end)
        seen.add(name)
    assert max(ends) == size, shard
assert seen == set(index["weight_map"]), "index and shards disagree"
assert index["metadata"]["total_size"] == total
print("ok", len(seen))
)PY", folder);
  EXPECT_EQ(rc, 0) << read_text(work.file("py.log"));
}

TEST(FinetuneRoundTrip, DiffusersUNetFolder) {
  const TempDir work("ft_unet");
  const fs::path w = work.path();
  const Named base = write_diffusers_folder((w / "base").string(), torch::kFloat16);
  run_ok({zest_binary(), "data", "synth", "--model", "unet_tiny", "--out", (w / "data").string(), "--samples", "24"});
  const std::string out = train("sd15_finetune.toml", (w / "base").string(), w / "data", w / "run", 3);
  EXPECT_NE(out.find("pretrained: loaded " + std::to_string(base.size()) + " tensors"), std::string::npos) << out;
  EXPECT_NE(out.find("some_future_field"), std::string::npos) << out;  // the unknown field is reported
  const Named trained = read_safetensors((w / "run" / "model.safetensors").string());
  expect_started_from(trained, base);
  // merge_at_end with [ema]: the EMA of the weights too, which lags the trained weights.
  const Named ema = read_safetensors((w / "run" / "model_ema.safetensors").string());
  expect_started_from(ema, base);
  EXPECT_TRUE(std::any_of(ema.begin(), ema.end(), [&](const auto& e) { return !e.second.equal(trained.at(e.first)); }))
      << "the EMA equals the trained weights";
  EXPECT_NE(out.find("merged EMA of the weights: "), std::string::npos) << out;
  run_ok({zest_binary(), "merge", (w / "run" / "checkpoints").string(), "--ema", "--format", "diffusers", "-o",
          (w / "export_ema").string()});
  EXPECT_EQ(read_text((w / "export_ema" / "config.json").string()), read_text((w / "base" / "config.json").string()));
  expect_identical(load_as_pretrained((w / "export_ema").string()), ema, "EMA export (diffusers)");

  // Sharded export: diffusers' file names and index; config.json exactly the one read in.
  run_ok({zest_binary(), "merge", (w / "run" / "checkpoints").string(), "--format", "diffusers", "--shard-size",
          "200KB", "-o", (w / "export").string()});
  EXPECT_TRUE(fs::exists(w / "export" / "diffusion_pytorch_model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(w / "export" / "diffusion_pytorch_model-00001-of-00004.safetensors"));
  EXPECT_EQ(read_text((w / "export" / "config.json").string()), read_text((w / "base" / "config.json").string()));
  expect_identical(load_as_pretrained((w / "export").string()), trained, "sharded export");
  expect_python_reads_diffusers_folder(work, (w / "export").string());

  // Exported again unsharded into the same folder: the stale shards and index go, one file stays.
  run_ok({zest_binary(), "merge", (w / "run" / "checkpoints").string(), "--format", "diffusers", "-o",
          (w / "export").string()});
  EXPECT_FALSE(fs::exists(w / "export" / "diffusion_pytorch_model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(w / "export" / "diffusion_pytorch_model-00001-of-00004.safetensors"));
  expect_identical(load_as_pretrained((w / "export").string()), trained, "single-file export");
}

TEST(FinetuneRoundTrip, HyMotionReleaseFolder) {
  const TempDir work("ft_hy");
  const fs::path w = work.path();
  const auto [network, pipeline] = write_hymotion_release((w / "base").string());
  run_ok({zest_binary(), "data", "synth", "--model", "hymotion_tiny", "--out", (w / "data").string(), "--samples", "24"});
  const std::string out = train("hymotion_finetune.toml", (w / "base").string(), w / "data", w / "run", 3, hymotion_sets());
  EXPECT_NE(out.find("pretrained: loaded " + std::to_string(network.size()) + " tensors"), std::string::npos) << out;
  const Named trained = read_safetensors((w / "run" / "model.safetensors").string());
  expect_started_from(trained, network);
  run_ok({zest_binary(), "merge", (w / "run" / "checkpoints").string(), "--format", "hymotion", "--ema", "-o",
          (w / "export_ema").string()});
  expect_identical(load_as_pretrained((w / "export_ema").string()),
                   read_safetensors((w / "run" / "model_ema.safetensors").string()), "EMA export (hymotion)");

  run_ok({zest_binary(), "merge", (w / "run" / "checkpoints").string(), "--format", "hymotion", "-o",
          (w / "export").string()});
  EXPECT_EQ(read_text((w / "export" / "config.yml").string()), read_text((w / "base" / "config.yml").string()));
  expect_identical(load_as_pretrained((w / "export").string()), trained, "exported network");
  const TorchArchiveReader archive((w / "export" / "latest.ckpt").string());
  Named carried;
  for (const auto& entry : archive.state_dict("model_state_dict")) {
    if (entry.name.rfind("motion_transformer.", 0) != 0) carried[entry.name] = archive.read(entry);
  }
  expect_identical(carried, pipeline, "pipeline tensors");

  // The README's look at the result: `zest sample` from the run's checkpoint draws what it draws from
  // the merged weights of the same step (and from the EMA's, with --ema).
  const std::vector<std::string> draw{zest_binary(), "sample", "--pretrained", (w / "base").string(), "--text",
                                      (w / "data").string(), "--sample", "3", "--frames", "6", "--steps", "2",
                                      "-n", "2"};
  auto sample = [&](std::vector<std::string> source, const fs::path& out) {
    std::vector<std::string> argv = draw;
    argv.insert(argv.end(), source.begin(), source.end());
    argv.insert(argv.end(), {"-o", out.string()});
    run_ok(argv);
    return read_text(out.string());
  };
  const std::string checkpoints = (w / "run" / "checkpoints").string();
  EXPECT_EQ(sample({"--checkpoint", checkpoints}, w / "from_checkpoint.npy"),
            sample({"--weights", (w / "run" / "model.safetensors").string()}, w / "from_merge.npy"));
  EXPECT_EQ(sample({"--checkpoint", checkpoints, "--ema"}, w / "from_ema.npy"),
            sample({"--weights", (w / "run" / "model_ema.safetensors").string()}, w / "from_ema_merge.npy"));
  EXPECT_NE(read_text((w / "from_checkpoint.npy").string()), sample({}, w / "from_release.npy"));

  if (!python_has("torch") || !python_has("yaml")) return;
  const int rc = python(work, R"PY(
import sys, torch, yaml
export, base = sys.argv[1], sys.argv[2]
ckpt = torch.load(export + "/latest.ckpt", map_location="cpu", weights_only=True)
orig = torch.load(base + "/latest.ckpt", map_location="cpu", weights_only=True)
sd, sd0 = ckpt["model_state_dict"], orig["model_state_dict"]
assert list(ckpt) == ["model_state_dict"]
assert set(sd) == set(sd0), set(sd) ^ set(sd0)
for name in ["null_vtxt_feat", "null_ctxt_input", "special_game_vtxt_feat", "special_game_ctxt_feat", "mean", "std"]:
    assert torch.equal(sd[name], sd0[name]), name
assert all(sd[k].shape == sd0[k].shape for k in sd)
config = yaml.load(open(export + "/config.yml"), Loader=yaml.FullLoader)
assert config["network_module"] == "hymotion/network/hymotion_mmdit.HunyuanMotionMMDiT"
assert config["network_module_args"]["unused_by_the_network"] == 7
print("ok", len(sd))
)PY", (w / "export").string() + " " + (w / "base").string());
  EXPECT_EQ(rc, 0) << read_text(work.file("py.log"));
}

// Auto-resume wins over pretrained: after the first part of a run the base weights are made unreadable;
// the resumed run must not read them, and ends exactly where an uninterrupted run ends.
TEST(FinetuneRoundTrip, AResumedFineTuneDoesNotReloadTheBaseWeights) {
  const TempDir work("ft_resume");
  const fs::path w = work.path();
  write_hymotion_release((w / "base").string());
  run_ok({zest_binary(), "data", "synth", "--model", "hymotion_tiny", "--out", (w / "data").string(), "--samples", "24"});
  const std::vector<std::string> seq = hymotion_sets();
  train("hymotion_finetune.toml", (w / "base").string(), w / "data", w / "full", 4, seq);
  train("hymotion_finetune.toml", (w / "base").string(), w / "data", w / "split", 2, seq);
  std::ofstream((w / "base" / "latest.ckpt").string(), std::ios::trunc) << "no longer a checkpoint";
  const std::string out = train("hymotion_finetune.toml", (w / "base").string(), w / "data", w / "split", 4, seq);
  EXPECT_NE(out.find("not loaded: the run resumes from its checkpoint"), std::string::npos) << out;
  expect_identical(read_safetensors((w / "split" / "model.safetensors").string()),
                   read_safetensors((w / "full" / "model.safetensors").string()), "resumed vs uninterrupted");
  expect_identical(read_safetensors((w / "split" / "model_ema.safetensors").string()),
                   read_safetensors((w / "full" / "model_ema.safetensors").string()), "EMA: resumed vs uninterrupted");
  // The resumed run's checkpoints still carry the release's config and pipeline tensors to an export.
  run_ok({zest_binary(), "merge", (w / "split" / "checkpoints").string(), "--format", "hymotion", "-o",
          (w / "export").string()});
  EXPECT_EQ(read_text((w / "export" / "config.yml").string()), read_text((w / "base" / "config.yml").string()));
  const TorchArchiveReader archive((w / "export" / "latest.ckpt").string());
  size_t carried = 0;
  for (const auto& entry : archive.state_dict("model_state_dict")) carried += entry.name == "null_vtxt_feat";
  EXPECT_EQ(carried, 1u);
}

}  // namespace
}  // namespace zest::testing
