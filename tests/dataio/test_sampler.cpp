// DistributedSampler: ranks disjoint and complete for N ∈ {1, 2, 3, 4} with drop-last and padding,
// per-epoch reshuffles that every rank agrees on, mid-epoch resume, and resume at another world size
// through the global position; plus a real multi-rank check.
#include "data/sampler.h"
#include "comm/world.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

namespace zest::testing {
namespace {

// Every rank's epoch list, simulated in one process.
std::vector<std::vector<int64_t>> all_ranks(int64_t size, int world, const SamplerOptions& o, int64_t epoch) {
  std::vector<std::vector<int64_t>> lists;
  for (int r = 0; r < world; ++r) lists.push_back(DistributedSampler(size, r, world, o).epoch_indices(epoch));
  return lists;
}

TEST(Sampler, DropLastIsDisjointAndCoversAllButTheRemainder) {
  for (int world : {1, 2, 3, 4}) {
    for (int64_t size : {1, 7, 10, 12, 13}) {
      if (size < world) continue;
      SamplerOptions o{.seed = 5, .shuffle = true, .drop_last = true};
      const auto lists = all_ranks(size, world, o, 2);
      std::multiset<int64_t> seen;
      for (const auto& l : lists) {
        EXPECT_EQ(static_cast<int64_t>(l.size()), size / world) << "world " << world << " size " << size;
        seen.insert(l.begin(), l.end());
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), size / world * world);
      EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "a sample on two ranks";
      for (int64_t i : seen) EXPECT_TRUE(i >= 0 && i < size);
    }
  }
}

TEST(Sampler, PaddingCoversEverySampleAndRepeatsOnlyTheFirst) {
  for (int world : {1, 2, 3, 4}) {
    for (int64_t size : {1, 2, 7, 10, 12, 13}) {
      SamplerOptions o{.seed = 9, .shuffle = true, .drop_last = false};
      const auto lists = all_ranks(size, world, o, 0);
      std::map<int64_t, int> count;
      for (const auto& l : lists) {
        EXPECT_EQ(static_cast<int64_t>(l.size()), (size + world - 1) / world);
        for (int64_t i : l) ++count[i];
      }
      EXPECT_EQ(static_cast<int64_t>(count.size()), size) << "world " << world << " size " << size;
      int64_t extra = 0;
      for (const auto& [i, c] : count) extra += c - 1;
      const int64_t padded = (size + world - 1) / world * world;
      EXPECT_EQ(extra, padded - size);
      // The repeats are the first samples of the epoch's order (rank 0's first ones, etc.).
      const std::vector<int64_t> order = DistributedSampler(size, 0, 1, o).epoch_indices(0);
      for (int64_t k = 0; k < padded - size; ++k) EXPECT_GE(count[order[static_cast<size_t>(k % size)]], 2);
    }
  }
}

TEST(Sampler, EpochsReshuffleDeterministically) {
  SamplerOptions o{.seed = 1};
  DistributedSampler a(100, 0, 1, o), b(100, 0, 1, o);
  EXPECT_EQ(a.epoch_indices(3), b.epoch_indices(3));
  EXPECT_NE(a.epoch_indices(0), a.epoch_indices(1));
  DistributedSampler other_seed(100, 0, 1, SamplerOptions{.seed = 2});
  EXPECT_NE(a.epoch_indices(0), other_seed.epoch_indices(0));
  auto sorted = a.epoch_indices(0);
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
  DistributedSampler ordered(10, 1, 3, SamplerOptions{.shuffle = false});
  EXPECT_EQ(ordered.epoch_indices(0), (std::vector<int64_t>{1, 4, 7, 0}));  // padding wraps to the start
}

TEST(Sampler, StreamCrossesEpochsAndResumesMidEpoch) {
  SamplerOptions o{.seed = 3};
  DistributedSampler s(10, 1, 3, o);  // 4 per rank (padded)
  std::vector<int64_t> expected = s.epoch_indices(0);
  const auto e1 = s.epoch_indices(1);
  expected.insert(expected.end(), e1.begin(), e1.end());
  std::vector<int64_t> got;
  for (int i = 0; i < 3; ++i) got.push_back(s.next());
  const SamplerPosition saved = s.state();
  EXPECT_EQ(saved, (SamplerPosition{0, 3}));
  const auto rest = s.next_n(5);
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_EQ(got, expected);
  EXPECT_EQ(s.state(), (SamplerPosition{2, 0}));

  DistributedSampler resumed(10, 1, 3, o);
  resumed.load_state(saved);
  EXPECT_EQ(resumed.next_n(5), rest);
  EXPECT_THROW(resumed.load_state({0, 4}), std::exception);  // index past the epoch
}

// A position saved by W ranks, re-split for W' ranks: with what the old world read and what the new one
// reads for the rest of the epoch, every sample of the epoch is read, and no position of the epoch's
// order is read more than once beyond the at most W' − 1 that the split repeats.
TEST(Sampler, ResumeAtAnotherWorldSizeSkipsNothing) {
  const SamplerOptions o{.seed = 7};
  for (int64_t size : {10, 13, 24, 64}) {
    for (int old_world : {1, 2, 3, 4}) {
      const int64_t old_per_rank = DistributedSampler(size, 0, old_world, o).samples_per_rank();
      for (int64_t index = 0; index < old_per_rank; ++index) {
        for (int new_world : {1, 2, 3, 4}) {
          std::map<int64_t, int> reads;  // sample → times read in epoch 3
          for (int r = 0; r < old_world; ++r) {
            const auto list = DistributedSampler(size, r, old_world, o).epoch_indices(3);
            for (int64_t k = 0; k < index; ++k) ++reads[list[static_cast<size_t>(k)]];
          }
          const GlobalPosition global = DistributedSampler(size, 0, old_world, o).to_global({3, index});
          EXPECT_EQ(global, (GlobalPosition{3, index * old_world}));
          for (int r = 0; r < new_world; ++r) {
            DistributedSampler s(size, r, new_world, o);
            const SamplerPosition p = s.from_global(global);
            ASSERT_EQ(p.epoch, 3);
            s.load_state(p);
            for (int64_t k = p.index; k < s.samples_per_rank(); ++k) ++reads[s.next()];
          }
          const std::string where = "size " + std::to_string(size) + ", " + std::to_string(old_world) + " → " +
                                    std::to_string(new_world) + " ranks at index " + std::to_string(index);
          ASSERT_EQ(static_cast<int64_t>(reads.size()), size) << where << ": a sample of the epoch was skipped";
          int64_t extra = 0;
          for (const auto& [sample, times] : reads) extra += times - 1;
          const int64_t padding = (size + new_world - 1) / new_world * new_world - size;
          EXPECT_LE(extra, padding + new_world - 1) << where;
          if (global.consumed % new_world == 0) {
            EXPECT_EQ(extra, padding) << where << ": an exact split repeats nothing";
          }
        }
      }
    }
  }
}

TEST(Sampler, GlobalPositionOutsideTheEpochIsAnError) {
  DistributedSampler s(10, 0, 2, SamplerOptions{});
  EXPECT_EQ(s.from_global({2, 9}), (SamplerPosition{2, 4}));
  EXPECT_THROW(s.from_global({0, 10}), std::exception);
  EXPECT_THROW(s.from_global({-1, 0}), std::exception);
  EXPECT_THROW(s.from_global({0, -2}), std::exception);
  // With drop-last a re-split position past the shorter epoch starts the next one.
  DistributedSampler dropped(10, 1, 4, SamplerOptions{.drop_last = true});  // 2 per rank
  EXPECT_EQ(dropped.from_global({0, 9}), (SamplerPosition{1, 0}));
}

TEST(Sampler, DropLastWithTooFewSamplesIsAnError) {
  EXPECT_THROW(DistributedSampler(3, 0, 4, SamplerOptions{.drop_last = true}), std::exception);
  EXPECT_NO_THROW(DistributedSampler(3, 3, 4, SamplerOptions{.drop_last = false}));
}

// Under mpirun / zest launch: the ranks' real lists, gathered, are disjoint and complete.
TEST(DistSampler, RanksAgreeAndPartitionTheDataset) {
  auto comm = world_communicator();
  const int world = comm->size();
  for (bool drop_last : {false, true}) {
    DistributedSampler s(23, comm->rank(), world, SamplerOptions{.seed = 11, .drop_last = drop_last});
    const auto mine = torch::tensor(s.epoch_indices(4), torch::kInt64);
    auto all = torch::empty({mine.numel() * world}, torch::kInt64);
    comm->allgather(mine, all)->wait();
    std::vector<int64_t> gathered(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + all.numel());
    const std::set<int64_t> unique(gathered.begin(), gathered.end());
    if (drop_last) {
      EXPECT_EQ(unique.size(), gathered.size());
      EXPECT_EQ(static_cast<int64_t>(gathered.size()), 23 / world * world);
    } else {
      EXPECT_EQ(static_cast<int64_t>(unique.size()), 23);
    }
    // Every rank computed the same order: rank r's list is positions r, r+W, ... of rank 0's view.
    std::vector<std::vector<int64_t>> simulated;
    for (int r = 0; r < world; ++r)
      simulated.push_back(DistributedSampler(23, r, world, SamplerOptions{.seed = 11, .drop_last = drop_last})
                              .epoch_indices(4));
    for (int r = 0; r < world; ++r)
      for (size_t k = 0; k < simulated[r].size(); ++k)
        EXPECT_EQ(gathered[r * simulated[r].size() + k], simulated[r][k]);
  }
}

// Under mpirun at 2, 3 and 4 ranks: a data position saved by another world (any count of consumed
// positions, as `zest train` saves it) resumes every rank at ⌊consumed / W⌋ of the epoch, the ranks'
// remaining samples (gathered) are the rest of the epoch's world-independent order with nothing skipped,
// and the next epoch is a different shuffle that the ranks again split between them.
TEST(DistSampler, ResumedPositionAndNextEpochOrderAcrossRanks) {
  auto comm = world_communicator();
  const int world = comm->size(), rank = comm->rank();
  constexpr int64_t kSize = 23, kEpoch = 2;
  const SamplerOptions o{.seed = 13};
  // The global order of an epoch: what one rank alone reads (the same for every world size).
  auto global_order = [&](int64_t epoch) { return DistributedSampler(kSize, 0, 1, o).epoch_indices(epoch); };
  auto gather = [&](const std::vector<int64_t>& mine) {
    const auto local = torch::tensor(mine, torch::kInt64);
    auto all = torch::empty({local.numel() * world}, torch::kInt64);
    comm->allgather(local, all)->wait();
    return std::vector<int64_t>(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + all.numel());
  };
  const auto order = global_order(kEpoch), next_order = global_order(kEpoch + 1);
  ASSERT_NE(order, next_order) << "epoch " << kEpoch + 1 << " repeats epoch " << kEpoch << "'s shuffle";
  for (const int64_t consumed : {0, 1, 2, 5, 7, 11, 21, 22}) {
    const std::string where = std::to_string(world) + " ranks resuming after " + std::to_string(consumed) + " consumed";
    DistributedSampler s(kSize, rank, world, o);
    const SamplerPosition p = s.from_global({kEpoch, consumed});
    const int64_t index = consumed / world;
    const SamplerPosition expected = index < s.samples_per_rank() ? SamplerPosition{kEpoch, index}
                                                                  : SamplerPosition{kEpoch + 1, 0};
    EXPECT_EQ(p, expected) << where;
    s.load_state(p);
    const int64_t rest = p.epoch == kEpoch ? s.samples_per_rank() - p.index : 0;
    const auto rest_all = gather(s.next_n(rest));
    const auto next_all = gather(s.next_n(s.samples_per_rank()));
    // Rank r's k-th remaining sample is position (p.index + k)·W + r of the order (wrapping as padding does).
    std::set<int64_t> read(order.begin(), order.begin() + consumed);
    for (int r = 0; r < world; ++r) {
      for (int64_t k = 0; k < rest; ++k) {
        const int64_t got = rest_all[static_cast<size_t>(r * rest + k)];
        EXPECT_EQ(got, order[static_cast<size_t>(((p.index + k) * world + r) % kSize)]) << where << ", rank " << r;
        read.insert(got);
      }
    }
    EXPECT_EQ(static_cast<int64_t>(read.size()), kSize) << where << ": a sample of the epoch was skipped";
    const int64_t per_rank = s.samples_per_rank();
    std::set<int64_t> next_read;
    for (int r = 0; r < world; ++r) {
      for (int64_t k = 0; k < per_rank; ++k) {
        const int64_t got = next_all[static_cast<size_t>(r * per_rank + k)];
        EXPECT_EQ(got, next_order[static_cast<size_t>((k * world + r) % kSize)]) << where << ", next epoch, rank " << r;
        next_read.insert(got);
      }
    }
    EXPECT_EQ(static_cast<int64_t>(next_read.size()), kSize) << where << ": the next epoch missed a sample";
  }
}

}  // namespace
}  // namespace zest::testing
