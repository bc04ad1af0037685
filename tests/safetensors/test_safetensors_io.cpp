// safetensors round trips (every dtype, streaming pieces, byte ranges) and the golden files' contents.
#include "tests/safetensors/safetensors_test_util.h"

#include "formats/safetensors.h"
#include "core/check.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace zest::safetensors {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using test::expect_error;

torch::Tensor sample(torch::Dtype dtype, std::vector<int64_t> shape) {
  const int64_t numel = c10::multiply_integers(shape);
  torch::Tensor base = torch::arange(numel, torch::kFloat64).sub(numel / 2.0).mul(1.25);
  if (dtype == torch::kBool) return base.gt(0).reshape(shape);
  if (dtype == torch::kUInt8) return torch::arange(numel, torch::kInt64).mul(7).remainder(256).to(dtype).reshape(shape);
  return base.to(dtype).reshape(shape);
}

TEST(Safetensors, RoundTripEveryDtype) {
  const TempDir dir;
  const std::vector<torch::Dtype> dtypes = {torch::kFloat32, torch::kFloat16, torch::kBFloat16, torch::kFloat64,
                                            torch::kInt64,   torch::kInt32,   torch::kInt16,    torch::kInt8,
                                            torch::kUInt8,   torch::kBool};
  NamedTensors tensors;
  for (size_t i = 0; i < dtypes.size(); ++i)
    tensors.emplace_back("t" + std::to_string(i) + "." + dtype_name(dtypes[i]), sample(dtypes[i], {3, 5}));
  tensors.emplace_back("scalar", torch::tensor(3.5, torch::kFloat32).reshape({}));
  tensors.emplace_back("empty", torch::zeros({0, 4}, torch::kBFloat16));
  const std::string path = dir.file("all.safetensors");
  save_file(path, tensors, {{"format", "pt"}, {"step", "12"}});
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const Reader reader(path);
  EXPECT_EQ(reader.metadata().at("format"), "pt");
  EXPECT_EQ(reader.metadata().at("step"), "12");
  ASSERT_EQ(reader.tensors().size(), tensors.size());
  for (const auto& [name, expected] : tensors) {
    const torch::Tensor got = reader.read(name);
    EXPECT_EQ(got.scalar_type(), expected.scalar_type()) << name;
    EXPECT_EQ(got.sizes(), expected.sizes()) << name;
    EXPECT_TRUE(torch::equal(got, expected)) << name;
  }
  // Tensors are listed in offset order, which is declaration order for files zest writes.
  EXPECT_EQ(reader.tensors().front().name, "t0.F32");
  EXPECT_EQ(reader.info("t8.U8").shape, (std::vector<int64_t>{3, 5}));

  // The header is padded so that the data section starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  uint64_t header_bytes = 0;
  in.read(reinterpret_cast<char*>(&header_bytes), 8);
  EXPECT_EQ(header_bytes % 8, 0u);

  const NamedTensors loaded = load_file(path);
  ASSERT_EQ(loaded.size(), tensors.size());
  EXPECT_TRUE(torch::equal(loaded[4].second, tensors[4].second));  // int64
}

TEST(Safetensors, SaveFileReplacesExistingFileWhole) {
  const TempDir dir;
  const std::string path = dir.file("model.safetensors");
  save_file(path, {{"w", torch::ones({4})}});
  save_file(path, {{"w", torch::full({2}, 2.0)}, {"b", torch::zeros({1}, torch::kInt64)}});
  const Reader reader(path);
  EXPECT_EQ(reader.tensors().size(), 2u);
  EXPECT_TRUE(torch::equal(reader.read("w"), torch::full({2}, 2.0)));
}

TEST(Safetensors, StreamingWriterAcceptsPiecesAcrossTensors) {
  const TempDir dir;
  const std::string path = dir.file("stream.safetensors");
  Writer writer(path, {{"a", torch::kFloat32, {2, 3}}, {"none", torch::kFloat32, {0}},
                       {"b", torch::kBFloat16, {4}}, {"c", torch::kInt64, {2}}});
  // 6 + 4 + 2 elements in pieces of 4, 5 and 3, given as float64: each part lands in its tensor's dtype.
  const torch::Tensor all = torch::arange(12, torch::kFloat64);
  writer.append(all.slice(0, 0, 4));
  writer.append(all.slice(0, 4, 9));
  writer.append(all.slice(0, 9, 12));
  EXPECT_EQ(writer.bytes_written(), 6u * 4 + 4u * 2 + 2u * 8);
  writer.finish();

  const Reader reader(path);
  EXPECT_TRUE(torch::equal(reader.read("a"), torch::arange(6, torch::kFloat32).reshape({2, 3})));
  EXPECT_TRUE(torch::equal(reader.read("none"), torch::zeros({0})));
  EXPECT_TRUE(torch::equal(reader.read("b"), torch::arange(6, 10, torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(reader.read("c"), torch::arange(10, 12, torch::kInt64)));
}

TEST(Safetensors, WriterRejectsMisuse) {
  const TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  {
    Writer writer(path, {{"a", torch::kFloat32, {2}}, {"b", torch::kFloat32, {3}}});
    expect_error([&] { writer.write("b", torch::zeros({3})); }, {path, "write('b') out of order", "'a'"});
    expect_error([&] { writer.write("a", torch::zeros({3})); }, {"tensor 'a' declared with shape [2]", "3 elements"});
    writer.append(torch::zeros({3}));
    expect_error([&] { writer.finish(); }, {path, "finish() before all data was written", "'b'", "4 of 12 bytes"});
    expect_error([&] { writer.append(torch::zeros({3})); }, {"appended past the last declared tensor"});
  }
  EXPECT_FALSE(fs::exists(path)) << "an unfinished writer must not leave an invalid file";
  expect_error([&] { Writer(path, {{"a", torch::kFloat32, {1}}, {"a", torch::kFloat32, {1}}}); },
               {"tensor 'a' is declared twice"});
  expect_error([&] { Writer(path, {{"c", torch::kComplexFloat, {1}}}); }, {"cannot be stored in safetensors"});
}

TEST(Safetensors, ByteAndFlatRangeReads) {
  const TempDir dir;
  const std::string path = dir.file("ranges.safetensors");
  const torch::Tensor w = torch::arange(24, torch::kFloat32).reshape({4, 6});
  save_file(path, {{"pad", torch::ones({3}, torch::kInt8)}, {"w", w}});
  const Reader reader(path);
  EXPECT_TRUE(torch::equal(reader.read_flat_range("w", 5, 7), torch::arange(5, 12, torch::kFloat32)));
  EXPECT_EQ(reader.read_flat_range("w", 24, 0).numel(), 0);
  float values[2] = {0, 0};
  reader.read_bytes("w", 4 * 22, 8, values);
  EXPECT_EQ(values[0], 22.0f);
  EXPECT_EQ(values[1], 23.0f);
  expect_error([&] { reader.read_flat_range("w", 20, 5); },
               {path, "tensor 'w'", "element range [20, 25) is outside its 24 elements"});
  expect_error([&] { reader.read_bytes("w", 90, 8, values); }, {"byte range [90, 98) is outside its 96 bytes"});
  expect_error([&] { reader.read("missing"); }, {path, "no tensor named 'missing'"});
}

struct KeyCounts {
  int param = 0, input = 0, output = 0, grad = 0, debug = 0;
  int64_t param_numel = 0;
};

KeyCounts count_keys(const Reader& reader) {
  KeyCounts counts;
  for (const TensorInfo& t : reader.tensors()) {
    const std::string prefix = t.name.substr(0, t.name.find('.'));
    if (prefix == "param") {
      ++counts.param;
      counts.param_numel += t.numel();
    }
    counts.input += prefix == "input";
    counts.output += prefix == "output";
    counts.grad += prefix == "grad";
    counts.debug += prefix == "debug";
  }
  return counts;
}

TEST(Safetensors, GoldenUnetTiny) {
  const std::string path = std::string(ZEST_TEST_DATA) + "/unet_tiny.safetensors";
  EXPECT_EQ(fs::file_size(path), 1'570'852u);
  const Reader reader(path);
  const KeyCounts counts = count_keys(reader);
  EXPECT_EQ(counts.param, 618);
  EXPECT_EQ(counts.input, 5);
  EXPECT_EQ(counts.output, 2);
  EXPECT_EQ(counts.grad, 618);
  EXPECT_EQ(counts.debug, 12);
  EXPECT_EQ(counts.param_numel, 174'236);
  const torch::Tensor timestep = reader.read("input.timestep");
  EXPECT_EQ(timestep.scalar_type(), torch::kInt64);
  EXPECT_TRUE(torch::equal(timestep, torch::tensor({10, 999}, torch::kInt64)));
  EXPECT_EQ(reader.info("input.sample").shape, (std::vector<int64_t>{2, 4, 8, 8}));
  EXPECT_NEAR(reader.read("output.loss").item<float>(), 0.0980173647403717, 1e-7);
  // The loss is mean(output²): recompute it from the stored output.
  EXPECT_NEAR(reader.read("output.sample").square().mean().item<double>(), 0.0980173647403717, 1e-6);
}

TEST(Safetensors, GoldenHymotionTiny) {
  const std::string path = std::string(ZEST_TEST_DATA) + "/hymotion_tiny.safetensors";
  const Reader reader(path);
  const KeyCounts counts = count_keys(reader);
  EXPECT_EQ(counts.param, 142);
  EXPECT_EQ(counts.input, 6);
  EXPECT_EQ(counts.output, 2);
  EXPECT_EQ(counts.grad, 142);
  EXPECT_EQ(counts.debug, 16);
  EXPECT_EQ(counts.param_numel, 181'036);
  const torch::Tensor mask = reader.read("input.ctxt_mask_temporal");
  EXPECT_EQ(mask.scalar_type(), torch::kBool);
  EXPECT_EQ(mask.sizes(), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(mask.sum().item<int64_t>(), 10);
  EXPECT_FALSE(mask[1][5].item<bool>());
  EXPECT_NEAR(reader.read("output.loss").item<float>(), 0.3072718679904938, 1e-7);
  // A flat range of a parameter equals the same slice of the whole tensor.
  const std::string name = reader.tensors().back().name;
  const torch::Tensor whole = reader.read(name).reshape({-1});
  EXPECT_TRUE(torch::equal(reader.read_flat_range(name, 1, whole.numel() - 2), whole.slice(0, 1, -1)));
}

}  // namespace
}  // namespace zest::safetensors
