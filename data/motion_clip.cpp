// Reading a motion clip (see motion_clip.h): the .npy header parsed by hand, bounded and checked.
#include "data/motion_clip.h"

#include "core/check.h"
#include "core/untrusted_file.h"

#include <unistd.h>

#include <charconv>
#include <cstring>
#include <vector>

namespace zest {
namespace {

constexpr size_t kMaxNpyHeaderBytes = 1 << 16;

struct Descriptor {
  torch::Dtype dtype;
  size_t bytes;
};

Descriptor float_descriptor(const std::string& descr) {
  if (descr == "<f4" || descr == "=f4") return {torch::kFloat32, 4};
  if (descr == "<f8" || descr == "=f8") return {torch::kFloat64, 8};
  if (descr == "<f2" || descr == "=f2") return {torch::kFloat16, 2};
  throw Error("holds '" + printable(descr, 20) + "' values; a clip must be little-endian float16, float32 or float64");
}

// The value of 'key' in the header dict: the text after "'key':" up to the next top-level comma or brace.
std::string header_value(const std::string& header, const std::string& key) {
  const size_t at = header.find("'" + key + "':");
  if (at == std::string::npos) throw Error("has a .npy header without '" + key + "'");
  size_t p = at + key.size() + 3;
  while (p < header.size() && header[p] == ' ') ++p;
  if (p < header.size() && header[p] == '(') return header.substr(p, header.find(')', p) - p + 1);
  const size_t end = header.find_first_of(",}", p);
  return header.substr(p, end == std::string::npos ? std::string::npos : end - p);
}

std::vector<int64_t> parse_shape(const std::string& text) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') throw Error("has a malformed .npy shape");
  std::vector<int64_t> dims;
  const std::string inner = text.substr(1, text.size() - 2);
  for (size_t p = 0; p < inner.size();) {
    while (p < inner.size() && (inner[p] == ' ' || inner[p] == ',')) ++p;
    if (p >= inner.size()) break;
    int64_t value = -1;
    const auto [end, ec] = std::from_chars(inner.data() + p, inner.data() + inner.size(), value);
    if (ec != std::errc() || value < 0) throw Error("has a malformed .npy shape " + printable(text, 60));
    dims.push_back(value);
    p = static_cast<size_t>(end - inner.data());
    if (dims.size() > 8) throw Error("has a .npy shape of more than 8 dimensions");
  }
  return dims;
}

void read_exact(int fd, void* into, size_t bytes) {
  auto* p = static_cast<char*>(into);
  while (bytes > 0) {
    const ssize_t n = ::read(fd, p, bytes);
    if (n <= 0) throw Error("is truncated (ends inside its data)");
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

struct Fd {
  int fd;
  ~Fd() { ::close(fd); }
};

}  // namespace

torch::Tensor read_motion_clip(const std::string& path, const MotionClipLimits& limits) {
  const Fd file{open_regular_file(path, "motion clip")};
  const off_t size = ::lseek(file.fd, 0, SEEK_END);
  ::lseek(file.fd, 0, SEEK_SET);
  char preamble[12];
  if (size < 10) throw Error("is not a .npy file (too short)");
  read_exact(file.fd, preamble, 10);
  if (std::memcmp(preamble, "\x93NUMPY", 6) != 0) throw Error("is not a .npy file");
  const int major = static_cast<uint8_t>(preamble[6]);
  size_t header_bytes = static_cast<uint8_t>(preamble[8]) | (static_cast<size_t>(static_cast<uint8_t>(preamble[9])) << 8);
  size_t offset = 10;
  if (major == 2 || major == 3) {  // 4-byte header length
    read_exact(file.fd, preamble + 10, 2);
    header_bytes |= (static_cast<size_t>(static_cast<uint8_t>(preamble[10])) << 16) |
                    (static_cast<size_t>(static_cast<uint8_t>(preamble[11])) << 24);
    offset = 12;
  } else if (major != 1) {
    throw Error("is a .npy file of format version " + std::to_string(major) + " (1 to 3 are read)");
  }
  if (header_bytes > kMaxNpyHeaderBytes || offset + header_bytes > static_cast<size_t>(size))
    throw Error("has a .npy header longer than the file or than 64 KiB");
  std::string header(header_bytes, '\0');
  read_exact(file.fd, header.data(), header_bytes);
  const Descriptor d = float_descriptor([&] {
    std::string descr = header_value(header, "descr");
    if (descr.size() >= 2 && (descr.front() == '\'' || descr.front() == '"')) descr = descr.substr(1, descr.size() - 2);
    return descr;
  }());
  if (header_value(header, "fortran_order").find("False") == std::string::npos)
    throw Error("is stored in Fortran order; save it C-ordered (numpy.ascontiguousarray)");
  const std::vector<int64_t> shape = parse_shape(header_value(header, "shape"));
  if (shape.size() != 2) throw Error(str("has ", shape.size(), " dimensions; a clip is [frames, features]"));
  const int64_t frames = shape[0], width = shape[1];
  if (width != limits.motion_dim)
    throw Error(str("has ", width, " features per frame; the model takes ", limits.motion_dim));
  if (frames == 0) throw Error("is empty (0 frames)");
  if (frames > limits.max_frames)
    throw Error(str("is too long: ", frames, " frames, more than --max-frames ", limits.max_frames));
  const uint64_t data_bytes = static_cast<uint64_t>(frames) * static_cast<uint64_t>(width) * d.bytes;
  if (offset + header_bytes + data_bytes != static_cast<uint64_t>(size))
    throw Error(str("has ", static_cast<uint64_t>(size) - offset - header_bytes, " bytes of data; its header says ",
                    data_bytes));
  torch::Tensor clip = torch::empty({frames, width}, d.dtype);
  read_exact(file.fd, clip.data_ptr(), data_bytes);
  clip = clip.to(torch::kFloat32);
  const torch::Tensor bad = clip.isfinite().logical_not().any(1);
  if (bad.any().item<bool>()) {
    const int64_t frame = bad.nonzero()[0][0].item<int64_t>();
    throw Error(str("holds NaN or Inf values (first in frame ", frame, ")"));
  }
  return clip;
}

}  // namespace zest
