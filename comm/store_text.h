// Text values in a c10d store, which holds bytes: the two conversions the rendezvous and the peer watch share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zest {

inline std::vector<uint8_t> store_bytes(const std::string& text) { return {text.begin(), text.end()}; }
inline std::string store_text(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

}  // namespace zest
