// ProtoWriter (see protobuf_wire.h): keys are (field << 3 | wire type) varints; fixed-width values are
// little-endian IEEE-754.
#include "formats/protobuf_wire.h"

#include "core/check.h"

#include <cstring>

namespace zest {
namespace {

constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

}  // namespace

void ProtoWriter::raw_varint(uint64_t value) {
  while (value >= 0x80u) {
    out_.push_back(static_cast<char>((value & 0x7Fu) | 0x80u));
    value >>= 7;
  }
  out_.push_back(static_cast<char>(value));
}

void ProtoWriter::key(int field, int wire_type) {
  ZEST_CHECK(field >= 1 && field < (1 << 29), "protobuf field number ", field, " is out of range");
  raw_varint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

ProtoWriter& ProtoWriter::varint(int field, uint64_t value) {
  key(field, kVarint);
  raw_varint(value);
  return *this;
}

ProtoWriter& ProtoWriter::float64(int field, double value) {
  key(field, kFixed64);
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFFu));
  return *this;
}

ProtoWriter& ProtoWriter::float32(int field, float value) {
  key(field, kFixed32);
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFFu));
  return *this;
}

ProtoWriter& ProtoWriter::bytes(int field, std::string_view value) {
  key(field, kLengthDelimited);
  raw_varint(value.size());
  out_.append(value);
  return *this;
}

}  // namespace zest
