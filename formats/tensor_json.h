// Small tensors inside JSON (dtype, shape, base64 of the little-endian bytes), exact to the bit: how a
// checkpoint's metadata carries a released pipeline's own tensors through to an export.
#pragma once

#include "formats/json_field.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <string>

namespace zest {

// {"dtype": "F32", "shape": [1, 1, 768], "base64": "..."} (safetensors dtype names).
nlohmann::json tensor_to_json(const torch::Tensor& tensor);
// The tensor back (CPU, contiguous); errors name the field's file and path.
torch::Tensor tensor_from_json(const JsonField& value);
inline torch::Tensor tensor_from_json(const nlohmann::json& value, const std::string& what) {
  return tensor_from_json(JsonField(value, what));
}

}  // namespace zest
