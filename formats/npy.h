// A tiny NumPy .npy (format 1.0) encoder and reader for sampled outputs (zest sample, the examples), so
// that results open with a plain numpy.load(). Little-endian hosts only (x86-64, aarch64); bf16/fp16 are written as float32
// because NumPy has no bfloat16.
#pragma once

#include "core/check.h"
#include "core/compat.h"

#include <torch/torch.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace zest::npy {

static_assert(std::endian::native == std::endian::little, "the .npy writer assumes a little-endian host");

struct Header {
  std::string descr;           // "<f4", "<i8", "|b1", ...
  std::vector<int64_t> shape;
};

inline std::string descr_of(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat32: return "<f4";
    case torch::kFloat64: return "<f8";
    case torch::kInt64: return "<i8";
    case torch::kInt32: return "<i4";
    case torch::kUInt8: return "|u1";
    case torch::kBool: return "|b1";
    default: ZEST_FAIL(".npy: unsupported dtype ", dtype);
  }
}

inline torch::Dtype dtype_of(const std::string& descr) {
  for (const torch::Dtype d : {torch::kFloat32, torch::kFloat64, torch::kInt64, torch::kInt32, torch::kUInt8,
                               torch::kBool})
    if (descr_of(d) == descr) return d;
  ZEST_FAIL(".npy: unsupported descr '", descr, "'");
}

// The header dict, padded with spaces and a final newline so the data starts at a multiple of 64 bytes.
inline std::string header_text(const std::string& descr, const std::vector<int64_t>& shape) {
  std::string dims;
  for (const int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // "(2, 3)"; a 1-d shape keeps its comma: "(5,)"
  else if (shape.size() == 1) dims.pop_back();
  std::string text = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t preamble = 10;  // magic (6) + version (2) + header length (2)
  text.append(63 - (preamble + text.size()) % 64, ' ');
  return text + '\n';
}

// The file's bytes (write them with checkpoint::write_output_file, all-or-nothing).
inline std::string encode(const torch::Tensor& tensor) {
  torch::Tensor t = tensor.detach().to(torch::kCPU);
  if (t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf) t = t.to(torch::kFloat32);
  t = t.contiguous();
  const std::string header = header_text(descr_of(t.scalar_type()), t.sizes().vec());
  const auto header_len = static_cast<uint16_t>(header.size());
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes.push_back(static_cast<char>(header_len & 0xff));
  bytes.push_back(static_cast<char>(header_len >> 8));
  bytes += header;
  bytes.append(static_cast<const char*>(compat::const_data(t)), t.nbytes());
  return bytes;
}

// Parses the header of a file this writer (or NumPy, for C-order arrays) wrote, leaving `in` at the data.
inline Header read_header(std::ifstream& in, const std::string& path) {
  char preamble[10];
  in.read(preamble, 10);
  ZEST_CHECK(in.good() && std::string(preamble, 6) == "\x93NUMPY", path, " is not a .npy file");
  ZEST_CHECK(preamble[6] == 1, path, ": only .npy format 1.x is supported");
  const uint16_t len = static_cast<uint8_t>(preamble[8]) | (static_cast<uint8_t>(preamble[9]) << 8);
  std::string text(len, '\0');
  in.read(text.data(), len);
  ZEST_CHECK(in.good(), path, ": truncated header");
  ZEST_CHECK(text.find("'fortran_order': False") != std::string::npos, path, ": Fortran order is not supported");
  Header header;
  const size_t d = text.find("'descr': '");
  ZEST_CHECK(d != std::string::npos, path, ": header has no descr");
  header.descr = text.substr(d + 10, text.find('\'', d + 10) - (d + 10));
  const size_t open = text.find('(', text.find("'shape'")), close = text.find(')', open);
  ZEST_CHECK(open != std::string::npos && close != std::string::npos, path, ": header has no shape");
  const std::string dims = text.substr(open + 1, close - open - 1);
  for (size_t pos = 0; pos < dims.size();) {
    const size_t comma = std::min(dims.find(',', pos), dims.size());
    const std::string item = dims.substr(pos, comma - pos);
    if (item.find_first_not_of(' ') != std::string::npos) header.shape.push_back(std::stoll(item));
    pos = comma + 1;
  }
  return header;
}

inline Header read_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZEST_CHECK(in.good(), "cannot open ", path);
  return read_header(in, path);
}

inline torch::Tensor read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZEST_CHECK(in.good(), "cannot open ", path);
  const Header header = read_header(in, path);
  torch::Tensor t = torch::empty(header.shape, dtype_of(header.descr));
  in.read(static_cast<char*>(compat::mutable_data(t)), static_cast<std::streamsize>(t.nbytes()));
  ZEST_CHECK(in.gcount() == static_cast<std::streamsize>(t.nbytes()), path, ": truncated data");
  return t;
}

}  // namespace zest::npy
