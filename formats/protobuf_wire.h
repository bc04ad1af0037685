// The protocol-buffers wire format, writing side only: enough to encode a few fixed messages (TensorBoard's
// Event and Summary, formats/tensorboard_event.h) by field number, without generated code or libprotobuf.
// Fields are appended in call order; a nested message is a finished writer's bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zest {

class ProtoWriter {
 public:
  // Wire type 0: int32, int64, uint64, bool and enum fields (a negative int64 takes 10 bytes, as protobuf's own).
  ProtoWriter& varint(int field, uint64_t value);
  ProtoWriter& int64(int field, int64_t value) { return varint(field, static_cast<uint64_t>(value)); }
  // Wire type 1: a double field.
  ProtoWriter& float64(int field, double value);
  // Wire type 5: a float field.
  ProtoWriter& float32(int field, float value);
  // Wire type 2: string, bytes and embedded-message fields.
  ProtoWriter& bytes(int field, std::string_view value);
  ProtoWriter& message(int field, const ProtoWriter& nested) { return bytes(field, nested.str()); }

  const std::string& str() const { return out_; }

 private:
  void key(int field, int wire_type);
  void raw_varint(uint64_t value);

  std::string out_;
};

}  // namespace zest
