// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, the CRC of iSCSI, ext4 and TFRecord files) and the
// "masked" form TFRecord framing stores, so that a CRC of data that itself holds CRCs stays well mixed.
#pragma once

#include <cstdint>
#include <string_view>

namespace zest {

// CRC-32C of `bytes` continued from `crc` (0 to start): crc32c_extend(crc32c(a), b) == crc32c(a + b).
uint32_t crc32c_extend(uint32_t crc, std::string_view bytes);
inline uint32_t crc32c(std::string_view bytes) { return crc32c_extend(0, bytes); }

// The masked CRC TFRecord files carry: the CRC rotated right by 15 bits plus 0xA282EAD8.
inline uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }
inline uint32_t masked_crc32c(std::string_view bytes) { return mask_crc32c(crc32c(bytes)); }

}  // namespace zest
