// Seeded mutations of a checkpoint root for the fuzz test (test_fuzz.cpp): manifest fields (deleted,
// retyped, out-of-range numbers, layout lies, text damage), rank-file bytes (header and data), rank-file
// identities, missing / extra / swapped / truncated / duplicated / foreign files, and `latest`.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace zest::testing {

// What a mutation promises about the checkpoint it leaves.
enum class Expect {
  refused,  // damage that must be detected by inspect --verify, merge and load alike
  ok,       // harmless (an extra file, a `latest` that falls back): all three must succeed
  either,   // a consistent change that may be valid; an OK result must still give the original weights
};

struct Mutation {
  std::string category;     // for the counts
  std::string description;  // what was done, for failure messages
  Expect expect = Expect::either;
  bool rehashed = false;    // the manifest's checksum was recomputed after the edit (a consistent lie)
};

// The fixed list of categories, in the order cases cycle through them.
const std::vector<std::string>& fuzz_categories();

// Applies a random mutation of `category` to the checkpoint root `root`, whose latest checkpoint is
// `root/step_00000005` (saved by 2 ranks) next to an older `root/step_00000003`.
Mutation mutate_checkpoint(const std::string& root, const std::string& category, std::mt19937& rng);

}  // namespace zest::testing
