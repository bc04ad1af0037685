// Merging: the consolidated file holds exactly the model's state-dict (tied parameters under both
// names) with the trained values; offline (streamed from rank files, any chunk size), online (gathered
// unit by unit), sharded with a hub-style index, in bf16, from a resharded checkpoint, and read by
// PyTorch itself into an nn.Module with strict=True.
#include "ckpt_test_util.h"
#include "thread_world.h"

#include "formats/safetensors.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

namespace zest::testing {
namespace {

// Trains ToyNet on `world` ranks at `stage` for 5 steps, saves into dir; returns the parameters.
std::map<std::string, torch::Tensor> train_and_save(const std::string& dir, int world, int stage) {
  std::map<std::string, torch::Tensor> params;
  run_ranks(world, [&](int rank, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {stage, false, 7});
    train_toy(run, 0, 5);
    checkpoint::save(*run.engine, toy_save_request(dir));
    if (rank == 0) params = params_of(*run.model);
  });
  return params;
}

std::map<std::string, torch::Tensor> read_all(const std::vector<std::string>& files) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& file : files)
    for (auto& [name, t] : safetensors::load_file(file)) out[name] = t;
  return out;
}

TEST(CheckpointMerge, OfflineEqualsTheGatheredParameters) {
  TempDir dir;
  const auto params = train_and_save(dir.sub("ckpt"), 4, 2);
  for (const int64_t chunk : {int64_t{7}, int64_t{16} << 20}) {  // pieces smaller than a row, and whole tensors
    checkpoint::MergeOptions options;
    options.chunk_numel = chunk;
    const auto result = checkpoint::merge_offline(dir.sub("ckpt"), dir.sub("model.safetensors"), options);
    ASSERT_EQ(result.files, std::vector<std::string>{dir.sub("model.safetensors")});
    EXPECT_TRUE(result.index_path.empty());
    const auto merged = read_all(result.files);
    expect_bitwise_equal(params, merged, "merged file (chunk " + std::to_string(chunk) + ")");
    const safetensors::Reader reader(dir.sub("model.safetensors"));
    EXPECT_EQ(reader.metadata().at("format"), "pt");
    EXPECT_EQ(reader.metadata().at("zest.aliases"), R"({"head_extra.tied":"embed.weight"})");
  }
}

TEST(CheckpointMerge, Bf16AndShardedWithIndex) {
  TempDir dir;
  const auto params = train_and_save(dir.sub("ckpt"), 2, 1);
  checkpoint::MergeOptions options;
  options.dtype = checkpoint::parse_merge_dtype("bf16");
  options.shard_size_bytes = checkpoint::parse_byte_size("400B");
  const auto result = checkpoint::merge_offline(dir.sub("ckpt"), dir.sub("out/model.safetensors"), options);
  ASSERT_GT(result.files.size(), 2u);
  EXPECT_EQ(result.files.front(), dir.sub("out/model-00001-of-0000" + std::to_string(result.files.size()) +
                                          ".safetensors"));
  ASSERT_EQ(result.index_path, dir.sub("out/model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dir.sub("out/model.safetensors")));

  std::ifstream in(result.index_path);
  const auto index = nlohmann::json::parse(in);
  const auto merged = read_all(result.files);
  ASSERT_EQ(index["weight_map"].size(), params.size());
  uint64_t total = 0;
  for (const auto& [name, value] : params) {
    ASSERT_TRUE(merged.count(name)) << name;
    EXPECT_EQ(merged.at(name).scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(merged.at(name), value.to(torch::kBFloat16))) << name;
    const std::string file = index["weight_map"][name].get<std::string>();
    EXPECT_TRUE(safetensors::Reader(dir.sub("out/" + file)).contains(name)) << name << " not in " << file;
    total += merged.at(name).nbytes();
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
}

TEST(CheckpointMerge, OnlineMatchesOfflineForEveryStage) {
  for (const int stage : {0, 1, 2}) {
    TempDir dir;
    std::map<std::string, torch::Tensor> params;
    run_ranks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
      ToyRun run = make_toy_run(comm, {stage, false, 7});
      train_toy(run, 0, 4);
      checkpoint::save(*run.engine, toy_save_request(dir.sub("ckpt")));
      checkpoint::MergeOptions options;
      options.model_name = kModelName;
      const auto result = checkpoint::merge_online(*run.engine, dir.sub("online.safetensors"), options);
      EXPECT_EQ(result.files.size(), rank == 0 ? 1u : 0u);
      if (rank == 0) params = params_of(*run.model);
    });
    checkpoint::merge_offline(dir.sub("ckpt"), dir.sub("offline.safetensors"), {});
    expect_bitwise_equal(params, read_all({dir.sub("online.safetensors")}), "online, stage " + std::to_string(stage));
    expect_bitwise_equal(params, read_all({dir.sub("offline.safetensors")}), "offline, stage " + std::to_string(stage));
  }
}

// A bf16 run: parameters are bf16, the master fp32. The merged file (fp32, offline from the rank files and
// online from the engine) holds the master itself, bitwise, not the master rounded through the compute
// dtype; the master is chosen so that rounding it to bf16 would change it.
TEST(CheckpointMerge, Bf16RunMergesTheFp32MasterBitwise) {
  TempDir dir;
  std::map<std::string, torch::Tensor> master, params;
  run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    RunSpec spec;
    spec.precision = Precision::bf16;
    ToyRun run = make_toy_run(comm, spec);
    const int64_t local = kGlobalBatch / comm->size();
    for (int64_t step = 0; step < 5; ++step) {
      auto [x, y] = toy_batch(step, kGlobalBatch);
      auto out = run.model->forward(x.narrow(0, rank * local, local)).to(torch::kFloat32);
      run.engine->backward(torch::mse_loss(out, y.narrow(0, rank * local, local)));
      run.engine->step();
    }
    checkpoint::save(*run.engine, toy_save_request(dir.sub("ckpt")));
    const auto gathered = master_by_name(*run.engine);
    checkpoint::MergeOptions options;
    options.model_name = kModelName;
    checkpoint::merge_online(*run.engine, dir.sub("online.safetensors"), options);
    if (rank == 0) {
      master = gathered;
      params = params_of(*run.model);
    }
  });
  ASSERT_EQ(params.at("embed.weight").scalar_type(), torch::kBFloat16);
  bool rounding_shows = false;
  for (const auto& [name, value] : master) {
    EXPECT_TRUE(torch::equal(params.at(name), value.to(torch::kBFloat16))) << name << ": parameters = master in bf16";
    rounding_shows = rounding_shows || !torch::equal(value, value.to(torch::kBFloat16).to(torch::kFloat32));
  }
  ASSERT_TRUE(rounding_shows) << "the master is representable in bf16: the test could not fail";
  checkpoint::merge_offline(dir.sub("ckpt"), dir.sub("offline.safetensors"), {});
  for (const std::string file : {"offline.safetensors", "online.safetensors"}) {
    const auto merged = read_all({dir.sub(file)});
    for (const auto& [name, value] : merged) EXPECT_EQ(value.scalar_type(), torch::kFloat32) << file << ": " << name;
    expect_bitwise_equal(master, merged, file + " of a bf16 run");
  }
}

// 4 ranks save, 3 ranks load and save again: merging either checkpoint gives the same file contents.
TEST(CheckpointMerge, ResavedAfterReshardingMergesToTheSameModel) {
  TempDir dir;
  const auto params = train_and_save(dir.sub("ckpt4"), 4, 2);
  run_ranks(3, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {1, false, 99});
    checkpoint::load(*run.engine, toy_load_request(dir.sub("ckpt4")));
    checkpoint::save(*run.engine, toy_save_request(dir.sub("ckpt3")));
  });
  EXPECT_EQ(checkpoint::read_manifest(checkpoint::resolve_checkpoint(dir.sub("ckpt3"))).world_size, 3);
  checkpoint::merge_offline(dir.sub("ckpt4"), dir.sub("m4.safetensors"), {});
  checkpoint::merge_offline(dir.sub("ckpt3"), dir.sub("m3.safetensors"), {});
  expect_bitwise_equal(params, read_all({dir.sub("m3.safetensors")}), "merge of the resharded checkpoint");
  expect_bitwise_equal(read_all({dir.sub("m4.safetensors")}), read_all({dir.sub("m3.safetensors")}), "m4 vs m3");
}

// PyTorch 1.13 (/usr/bin/python3) reads the merged file with its own few lines of safetensors parsing,
// compares every tensor of the file by name (a tied pair's two names each) and loads it into an
// equivalent nn.Module with strict=True; values must match the C++ model's. The test also corrupts the
// primary of the tied pair (embed.weight) in a copy and requires the check to fail: loading alone would
// hide it, as the alias is loaded last into the same tensor.
TEST(CheckpointMerge, LoadsIntoPyTorchWithStrictTrue) {
  if (std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  TempDir dir;
  const auto params = train_and_save(dir.sub("ckpt"), 2, 2);
  checkpoint::merge_offline(dir.sub("ckpt"), dir.sub("model.safetensors"), {});
  safetensors::NamedTensors expected(params.begin(), params.end());
  safetensors::save_file(dir.sub("expected.safetensors"), expected);
  const std::string script = dir.sub("check.py");
  std::ofstream(script) << R"PY(
import json, struct, sys, torch
def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", e
        b, end = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:end]), dtype=torch.float32).reshape(e["shape"])
    return out, header.get("__metadata__", {})
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(13, 13)
        self.norm = torch.nn.LayerNorm(13)
class ToyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(7, 13)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(13, 5)
        self.head_extra = torch.nn.Module()
        self.head_extra.tied = self.embed.weight
        self.head_extra.unused_bias = torch.nn.Parameter(torch.zeros(3, 3))
expected, _ = read(sys.argv[2])
def check(path):
    merged, metadata = read(path)
    # Every tensor of the file, by name, before any loading: load_state_dict copies a tied pair into one
    # tensor, so whichever name it loads last would hide a wrong value under the other.
    assert set(merged) == set(expected), (sorted(merged), sorted(expected))
    for name, value in expected.items():
        assert torch.equal(merged[name], value), "file tensor " + name
    for alias, primary in json.loads(metadata["zest.aliases"]).items():
        assert torch.equal(merged[alias], merged[primary]), alias + " differs from " + primary
    model = ToyNet()
    model.load_state_dict(merged, strict=True)
    state = model.state_dict()
    assert set(state) == set(expected), (sorted(state), sorted(expected))
    for name, value in expected.items():
        assert torch.equal(state[name], value), name
    assert model.head_extra.tied is model.embed.weight
    return len(state)
print("ok", check(sys.argv[1]))
try:
    check(sys.argv[3])
    print("the corrupted copy passed")
except AssertionError as e:
    print("corrupted copy refused:", e)
)PY";
  // A copy with embed.weight (not its alias head_extra.tied) changed must fail the same check.
  safetensors::NamedTensors corrupted;
  const safetensors::Metadata metadata = safetensors::Reader(dir.sub("model.safetensors")).metadata();
  for (auto& [name, t] : safetensors::load_file(dir.sub("model.safetensors")))
    corrupted.emplace_back(name, name == "embed.weight" ? t + 1.0f : t);
  safetensors::save_file(dir.sub("corrupt.safetensors"), corrupted, metadata);

  const std::string command = "/usr/bin/python3 " + script + " " + dir.sub("model.safetensors") + " " +
                              dir.sub("expected.safetensors") + " " + dir.sub("corrupt.safetensors") + " > " +
                              dir.sub("py.log") + " 2>&1";
  const int rc = std::system(command.c_str());
  std::ifstream log(dir.sub("py.log"));
  const std::string output((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << output;
  EXPECT_NE(output.find("ok 14"), std::string::npos) << output;
  EXPECT_NE(output.find("corrupted copy refused: file tensor embed.weight"), std::string::npos) << output;
}

}  // namespace
}  // namespace zest::testing
