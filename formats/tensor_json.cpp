// Tensors as JSON with base64 data (see tensor_json.h).
#include "formats/tensor_json.h"

#include "formats/safetensors.h"
#include "core/check.h"

#include <cstring>

namespace zest {
namespace {

constexpr const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(const uint8_t* data, size_t size) {
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  for (size_t i = 0; i < size; i += 3) {
    const uint32_t chunk = (uint32_t{data[i]} << 16) | (i + 1 < size ? uint32_t{data[i + 1]} << 8 : 0) |
                           (i + 2 < size ? uint32_t{data[i + 2]} : 0);
    out += kAlphabet[(chunk >> 18) & 63];
    out += kAlphabet[(chunk >> 12) & 63];
    out += i + 1 < size ? kAlphabet[(chunk >> 6) & 63] : '=';
    out += i + 2 < size ? kAlphabet[chunk & 63] : '=';
  }
  return out;
}

std::string base64_decode(const std::string& text, const std::string& what) {
  ZEST_CHECK(text.size() % 4 == 0, what, ": base64 data of length ", text.size(), " (not a multiple of 4)");
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t chunk = 0;
    int padding = 0;
    for (size_t j = 0; j < 4; ++j) {
      const char c = text[i + j];
      const char* at = c == '=' ? nullptr : std::strchr(kAlphabet, c);
      ZEST_CHECK(c == '=' || (at != nullptr && c != '\0'), what, ": '", c, "' is not base64");
      if (c == '=') ++padding;
      chunk = chunk << 6 | (at ? static_cast<uint32_t>(at - kAlphabet) : 0);
    }
    out += static_cast<char>((chunk >> 16) & 255);
    if (padding < 2) out += static_cast<char>((chunk >> 8) & 255);
    if (padding < 1) out += static_cast<char>(chunk & 255);
  }
  return out;
}

}  // namespace

nlohmann::json tensor_to_json(const torch::Tensor& tensor) {
  const torch::Tensor data = tensor.detach().to(torch::kCPU).contiguous();
  return {{"dtype", safetensors::dtype_name(data.scalar_type())},
          {"shape", data.sizes().vec()},
          {"base64", base64_encode(static_cast<const uint8_t*>(data.data_ptr()),
                                   static_cast<size_t>(data.numel()) * data.element_size())}};
}

torch::Tensor tensor_from_json(const JsonField& value) {
  const std::string what = value.path().empty() ? value.file() : value.file() + ": field '" + value.path() + "'";
  const torch::Dtype dtype = safetensors::dtype_from_name(value.at("dtype").string(), what);
  const std::vector<int64_t> shape = value.at("shape").integers(0);
  const std::string bytes = base64_decode(value.at("base64").string(), what);
  // The shape must account for the data exactly; counted without overflow before anything is allocated.
  const uint64_t item = c10::elementSize(dtype);
  uint64_t expected = item;
  for (const int64_t d : shape) {
    const uint64_t dim = static_cast<uint64_t>(d);
    expected = (dim != 0 && expected > bytes.size() / dim + 1) ? bytes.size() + 1 : expected * dim;
  }
  if (bytes.size() != expected)
    value.at("base64").fail(str("holds ", bytes.size(), " bytes, not what the shape and dtype take"));
  torch::Tensor out = torch::empty(shape, torch::TensorOptions().dtype(dtype));
  std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
  return out;
}

}  // namespace zest
