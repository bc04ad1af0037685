// DistributedSampler: seeded per-epoch permutation, rank split with drop-last or padding, and the
// resumable position (per rank, and re-split across world sizes).
#include "data/sampler.h"

#include "data/seed.h"
#include "core/check.h"

#include <numeric>
#include <random>

namespace zest {
namespace {

// Uniform integer in [0, n) from raw mt19937_64 output by rejection (std::uniform_int_distribution's
// algorithm is implementation-defined, and ranks built with different standard libraries must agree).
uint64_t uniform_below(std::mt19937_64& gen, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;  // 2^64 mod n: the low values that would bias the modulo
  for (;;) {
    const uint64_t r = gen();
    if (r >= threshold) return r % n;
  }
}

}  // namespace

DistributedSampler::DistributedSampler(int64_t dataset_size, int rank, int world_size, const SamplerOptions& options)
    : dataset_size_(dataset_size), rank_(rank), world_size_(world_size), options_(options) {
  ZEST_CHECK(dataset_size > 0, "sampler: the dataset is empty");
  ZEST_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "sampler: rank ", rank, " outside world of size ",
             world_size);
  per_rank_ = options.drop_last ? dataset_size / world_size : (dataset_size + world_size - 1) / world_size;
  if (!options_.groups.empty()) {
    ZEST_CHECK(static_cast<int64_t>(options_.groups.size()) == dataset_size && options_.group_batch >= 1,
               "sampler: ", options_.groups.size(), " sample groups for ", dataset_size, " samples");
    std::vector<int64_t> counts;
    for (int64_t g : options_.groups) {
      ZEST_CHECK(g >= 0 && g < dataset_size, "sampler: sample group ", g, " outside [0, ", dataset_size, ")");
      if (static_cast<int64_t>(counts.size()) <= g) counts.resize(static_cast<size_t>(g + 1), 0);
      ++counts[static_cast<size_t>(g)];
    }
    num_groups_ = static_cast<int64_t>(counts.size());
    const int64_t block = options_.group_batch * world_size;
    int64_t blocks = 0;
    for (int64_t n : counts) blocks += (n + block - 1) / block;
    per_rank_ = blocks * options_.group_batch;
  }
  ZEST_CHECK(per_rank_ > 0, "sampler: drop_last with ", dataset_size, " samples and ", world_size,
             " ranks leaves no sample per rank; use more data or drop_last = false");
}

std::vector<int64_t> DistributedSampler::grouped_order(int64_t epoch) const {
  std::vector<std::vector<int64_t>> members(static_cast<size_t>(num_groups_));
  for (int64_t i = 0; i < dataset_size_; ++i) members[static_cast<size_t>(options_.groups[i])].push_back(i);
  auto shuffle = [](std::vector<int64_t>& v, uint64_t seed) {
    std::mt19937_64 gen(seed);
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[uniform_below(gen, i)]);
  };
  const int64_t block = options_.group_batch * world_size_;
  std::vector<std::vector<int64_t>> blocks;
  for (size_t g = 0; g < members.size(); ++g) {
    std::vector<int64_t>& m = members[g];
    if (m.empty()) continue;
    if (options_.shuffle) shuffle(m, mix_seed(options_.seed, static_cast<uint64_t>(epoch), g + 1));
    for (size_t start = 0; start < m.size(); start += static_cast<size_t>(block)) {
      std::vector<int64_t> b;
      for (int64_t k = 0; k < block; ++k) b.push_back(m[(start + static_cast<size_t>(k)) % m.size()]);
      blocks.push_back(std::move(b));
    }
  }
  std::vector<int64_t> block_order(blocks.size());
  std::iota(block_order.begin(), block_order.end(), int64_t{0});
  if (options_.shuffle) shuffle(block_order, mix_seed(options_.seed, static_cast<uint64_t>(epoch), 0));
  std::vector<int64_t> order;
  order.reserve(blocks.size() * static_cast<size_t>(block));
  for (int64_t b : block_order) order.insert(order.end(), blocks[b].begin(), blocks[b].end());
  return order;
}

std::vector<int64_t> DistributedSampler::epoch_indices(int64_t epoch) const {
  if (!options_.groups.empty()) {
    const std::vector<int64_t> order = grouped_order(epoch);
    std::vector<int64_t> mine;
    for (int64_t k = 0; k < per_rank_; ++k) mine.push_back(order[static_cast<size_t>(k * world_size_ + rank_)]);
    return mine;
  }
  std::vector<int64_t> order(static_cast<size_t>(dataset_size_));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (options_.shuffle) {
    std::mt19937_64 gen(mix_seed(options_.seed, static_cast<uint64_t>(epoch)));
    for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[uniform_below(gen, i + 1)]);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  for (int64_t k = 0; k < per_rank_; ++k) {
    // Padding positions past the end wrap around to the epoch's first samples.
    const int64_t position = (k * world_size_ + rank_) % dataset_size_;
    mine.push_back(order[static_cast<size_t>(position)]);
  }
  return mine;
}

int64_t DistributedSampler::next() {
  if (cached_epoch_ != position_.epoch) {
    cached_ = epoch_indices(position_.epoch);
    cached_epoch_ = position_.epoch;
  }
  const int64_t index = cached_[static_cast<size_t>(position_.index)];
  if (++position_.index == per_rank_) position_ = {position_.epoch + 1, 0};
  return index;
}

std::vector<int64_t> DistributedSampler::next_n(int64_t count) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out.push_back(next());
  return out;
}

SamplerPosition DistributedSampler::state() const { return position_; }

void DistributedSampler::load_state(const SamplerPosition& position) {
  ZEST_CHECK(position.epoch >= 0 && position.index >= 0 && position.index < per_rank_, "sampler: position {epoch ",
             position.epoch, ", index ", position.index, "} is outside an epoch of ", per_rank_,
             " samples per rank (was the checkpoint made with another dataset, world size or drop_last?)");
  position_ = position;
}

GlobalPosition DistributedSampler::to_global(const SamplerPosition& position) const {
  return {position.epoch, position.index * world_size_};
}

SamplerPosition DistributedSampler::from_global(const GlobalPosition& global) const {
  // Any world rolls over to the next epoch as soon as its ranks' index reaches the per-rank count, so a
  // saved position has consumed (per_rank − 1) · W < size positions at most, padded or dropped.
  ZEST_CHECK(global.epoch >= 0 && global.consumed >= 0 && global.consumed < global_epoch_size(),
             "sampler: data position {epoch ", global.epoch, ", ", global.consumed, " samples consumed} is outside "
             "an epoch of ", global_epoch_size(), " samples (was the checkpoint made with another dataset?)");
  const int64_t index = global.consumed / world_size_;
  if (index >= per_rank_) return {global.epoch + 1, 0};
  return {global.epoch, index};
}

}  // namespace zest
