// TFRecord framing, the container of TensorBoard's event files: each record is its length (uint64,
// little-endian), the masked CRC-32C of those 8 bytes, the payload, and the payload's masked CRC-32C.
#pragma once

#include <string>
#include <string_view>

namespace zest {

// The framed bytes of one record holding `payload`.
std::string tfrecord_frame(std::string_view payload);

}  // namespace zest
