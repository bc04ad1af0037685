// formats/npy.h: .npy files that NumPy can read (header layout, 64-byte alignment, shapes of any rank)
// and that read back to the same values.
#include "checkpoint/output_path.h"
#include "formats/npy.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace zest {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("zest_npy_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(Npy, HeaderIsNumpyFormatOneAndAligned) {
  const std::string path = temp_path("header.npy");
  checkpoint::write_output_file(path, npy::encode(torch::arange(6, torch::kFloat32).view({2, 3})));
  const std::string bytes = file_bytes(path);
  fs::remove(path);
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  const std::string header = bytes.substr(10, header_len);
  EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0), 0u) << header;
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(bytes.size(), 10 + header_len + 6 * sizeof(float));
}

TEST(Npy, RoundTripsShapesAndDtypes) {
  const std::string path = temp_path("roundtrip.npy");
  const std::vector<torch::Tensor> cases = {
      torch::randn({2, 3, 4}), torch::arange(5, torch::kInt64), torch::tensor(3.5, torch::kFloat64),
      torch::zeros({0, 4}), torch::tensor({true, false, true}), torch::randn({3, 2}).t()};  // non-contiguous
  for (const auto& t : cases) {
    checkpoint::write_output_file(path, npy::encode(t));
    const auto header = npy::read_header(path);
    EXPECT_EQ(header.shape, t.sizes().vec());
    const auto back = npy::read(path);
    EXPECT_EQ(back.scalar_type(), t.scalar_type());
    EXPECT_TRUE(back.equal(t)) << t;
  }
  fs::remove(path);
}

TEST(Npy, OneDimensionalShapeKeepsItsComma) {
  EXPECT_NE(npy::header_text("<f4", {5}).find("'shape': (5,)"), std::string::npos);
  EXPECT_NE(npy::header_text("<f4", {}).find("'shape': ()"), std::string::npos);
}

TEST(Npy, Bf16IsWrittenAsFloat32) {
  const std::string path = temp_path("bf16.npy");
  const auto t = torch::tensor({1.5, -2.0}).to(torch::kBFloat16);
  checkpoint::write_output_file(path, npy::encode(t));
  EXPECT_EQ(npy::read_header(path).descr, "<f4");
  EXPECT_TRUE(npy::read(path).equal(t.to(torch::kFloat32)));
  fs::remove(path);
}

TEST(Npy, RejectsOtherFiles) {
  const std::string path = temp_path("bad.npy");
  std::ofstream(path) << "not numpy at all";
  EXPECT_THROW(npy::read_header(path), Error);
  fs::remove(path);
}

}  // namespace
}  // namespace zest
