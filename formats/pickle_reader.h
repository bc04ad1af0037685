// The pickle program (data.pkl) of a torch.save archive, run without Python: dicts, lists, tuples,
// scalars and strings become values, tensors become descriptions (storage record, dtype, offset, shape,
// stride) whose bytes stay in the archive until asked for. Objects of classes zest does not know become
// opaque values instead of errors, so a checkpoint that also pickles e.g. training state still opens.
// The program is untrusted: lengths are checked against the bytes left, the number of values it may
// create is bounded, and values are released without recursion (a 10^6-deep list cannot overflow the stack).
#pragma once

#include "formats/input_limits.h"

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zest {

struct PickledTensor {
  std::string storage_key;  // the record is "data/<storage_key>"
  torch::Dtype dtype = torch::kFloat32;
  int64_t storage_numel = 0;  // elements of the storage (a view may use fewer)
  int64_t offset = 0;         // first element of the tensor in the storage
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;
};

struct PickleValue {
  PickleValue() = default;
  ~PickleValue();  // iterative: nested containers are released from a work list, not by recursion
  PickleValue(const PickleValue&) = delete;
  PickleValue& operator=(const PickleValue&) = delete;

  enum class Kind { none, boolean, integer, floating, string, bytes, tuple, list, dict, global, storage, tensor, opaque };
  Kind kind = Kind::none;
  int64_t integer = 0;  // boolean, integer
  double floating = 0.0;
  std::string text;  // string, bytes, global ("module.name"), opaque (its class or callable)
  std::vector<std::shared_ptr<PickleValue>> items;                                          // tuple, list
  std::vector<std::pair<std::shared_ptr<PickleValue>, std::shared_ptr<PickleValue>>> entries;  // dict
  PickledTensor tensor;  // storage (shape/stride unused), tensor
};
using PickleRef = std::shared_ptr<PickleValue>;

// Runs `program` (protocol 2-5, the opcodes torch.save and pickle emit for containers and tensors).
// Errors name `source`, the byte offset and the opcode. At most kMaxPickleValues values are created
// (formats/input_limits.h).
PickleRef unpickle(const std::string& program, const std::string& source, size_t max_values = kMaxPickleValues);

// The value of a dict for a string key, or nullptr.
PickleRef dict_get(const PickleValue& dict, const std::string& key);

}  // namespace zest
