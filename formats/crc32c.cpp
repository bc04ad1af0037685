// CRC-32C (see crc32c.h): the byte-at-a-time table method. Event files are written a record per logged
// step, kilobytes at most (a validation picture a few hundred), so a table is fast enough.
#include "formats/crc32c.h"

#include <array>

namespace zest {
namespace {

constexpr uint32_t kCastagnoliReflected = 0x82F63B78u;

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ kCastagnoliReflected : crc >> 1;
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

}  // namespace

uint32_t crc32c_extend(uint32_t crc, std::string_view bytes) {
  crc = ~crc;
  for (const char c : bytes) crc = kCrc32cTable[(crc ^ static_cast<uint8_t>(c)) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

}  // namespace zest
