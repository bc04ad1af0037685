// TFRecord framing (see tfrecord.h).
#include "formats/tfrecord.h"

#include "formats/crc32c.h"

#include <cstdint>

namespace zest {
namespace {

void append_little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

}  // namespace

std::string tfrecord_frame(std::string_view payload) {
  std::string length;
  append_little_endian(length, payload.size(), 8);
  std::string record = length;
  record.reserve(8 + 4 + payload.size() + 4);
  append_little_endian(record, masked_crc32c(length), 4);
  record.append(payload);
  append_little_endian(record, masked_crc32c(payload), 4);
  return record;
}

}  // namespace zest
