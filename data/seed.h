// Seed mixing for the data pipeline: independent, reproducible streams from (seed, epoch, position)
// without a shared generator (splitmix64 finaliser: fully specified, identical on every platform).
#pragma once

#include <cstdint>

namespace zest {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t mix_seed(uint64_t a, uint64_t b) { return splitmix64(splitmix64(a) ^ (b + 0x632be59bd9b4e019ULL)); }

inline uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) { return mix_seed(mix_seed(a, b), c); }

}  // namespace zest
