// DataLoader: batches independent of the worker count and timing, exact mid-epoch resume (also through
// the global position), a worker's error reaching next() with the file name, clean shutdown with a full
// queue, and worker threads that cannot all start being an error rather than an abort.
#include "data/loader.h"
#include "dataio_test_util.h"
#include "core/check.h"

#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace zest::testing {
namespace {

std::vector<Sample> take(DataLoader& loader, int n) {
  std::vector<Sample> batches;
  for (int i = 0; i < n; ++i) batches.push_back(loader.next());
  return batches;
}

void expect_same(const std::vector<Sample>& a, const std::vector<Sample>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    for (const auto& [name, tensor] : a[i])
      EXPECT_TRUE(torch::equal(tensor, b[i].at(name))) << "batch " << i << " tensor " << name;
  }
}

class LoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<ScratchDir>("loader");
    synth_small(dir_->path(), "hymotion_tiny", 11, 4);
  }
  static void TearDownTestSuite() { dir_.reset(); }

  std::unique_ptr<DataLoader> make(int workers, int rank = 0, int world = 2, uint64_t seed = 4) const {
    auto dataset = open_dataset(dir_->path(), {.seq_len = 16});
    DistributedSampler sampler(dataset->size(), rank, world, SamplerOptions{.seed = seed});
    const LoaderOptions options{.batch_size = 3, .num_workers = workers, .seed = seed};
    return std::make_unique<DataLoader>(dataset, sampler, options);
  }
  static std::unique_ptr<ScratchDir> dir_;
};
std::unique_ptr<ScratchDir> LoaderTest::dir_;

TEST_F(LoaderTest, BatchesDoNotDependOnWorkers) {
  const auto sync = take(*make(0), 7);  // 21 samples: crosses three epochs of 6 per rank
  expect_same(sync, take(*make(1), 7));
  expect_same(sync, take(*make(3), 7));
  EXPECT_EQ(sync[0].at("x").sizes(), (std::vector<int64_t>{3, 16, 12}));
  EXPECT_EQ(sync[0].at("vtxt_input").sizes(), (std::vector<int64_t>{3, 1, 16}));
  const auto other_rank = take(*make(2, 1), 1);
  EXPECT_FALSE(torch::equal(sync[0].at("vtxt_input"), other_rank[0].at("vtxt_input")));
}

TEST_F(LoaderTest, ResumeMidEpochGivesTheSameFollowingBatches) {
  auto uninterrupted = make(2);
  take(*uninterrupted, 3);
  const SamplerPosition saved = uninterrupted->state();
  EXPECT_EQ(saved, (SamplerPosition{1, 3}));  // 9 samples of 6 per epoch
  const auto expected = take(*uninterrupted, 4);

  auto resumed = make(2);
  take(*resumed, 1);  // a different position, and a queue full of prefetched batches to discard
  resumed->load_state(saved);
  EXPECT_EQ(resumed->state(), saved);
  expect_same(expected, take(*resumed, 4));
  EXPECT_EQ(resumed->state(), uninterrupted->state());
}

// The global position of 2 ranks, resumed on 1 rank: the next batch holds the epoch's next samples.
TEST_F(LoaderTest, GlobalPositionResumesAtAnotherWorldSize) {
  auto two = make(1, 0, 2);
  take(*two, 1);  // 3 samples per rank: 6 positions of epoch 0
  const GlobalPosition saved = two->global_state();
  EXPECT_EQ(saved, (GlobalPosition{0, 6}));
  auto one = make(0, 0, 1);
  one->load_global_state(saved);
  EXPECT_EQ(one->state(), (SamplerPosition{0, 6}));
  auto reference = make(0, 0, 1);
  take(*reference, 2);
  expect_same(take(*reference, 1), take(*one, 1));
}

TEST_F(LoaderTest, CropsDependOnTheSeed) {
  const auto a = take(*make(0, 0, 1, 4), 8);  // one rank: 11 per epoch
  const auto b = take(*make(0, 0, 1, 5), 8);
  EXPECT_FALSE(torch::equal(a[0].at("x"), b[0].at("x")));
}

TEST_F(LoaderTest, DestroyingWithAFullQueueJoinsTheWorkers) {
  for (int i = 0; i < 3; ++i) {
    auto loader = make(3);
    loader->next();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the workers fill the queue
  }
  SUCCEED();
}

TEST(LoaderErrors, AWorkersErrorNamesTheShardFile) {
  ScratchDir dir("loader-error");
  synth_small(dir.path(), "unet_tiny", 8, 4);
  auto dataset = open_dataset(dir.path());
  DistributedSampler sampler(dataset->size(), 0, 1, SamplerOptions{.shuffle = false});
  // Truncate the second shard after it was opened (and validated): reads of its samples then fail.
  const std::string shard = dir / "shard-00001.safetensors";
  std::filesystem::resize_file(shard, 200);
  DataLoader loader(dataset, sampler, LoaderOptions{.batch_size = 2, .num_workers = 2});
  EXPECT_NO_THROW(loader.next());
  EXPECT_NO_THROW(loader.next());
  try {
    loader.next();  // samples 4 and 5: in the truncated shard
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(shard), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sample 4"), std::string::npos) << e.what();
  }
}

// 100,000 workers aborted the process (the started threads were still joinable when the constructor
// threw). In a child process, threads get 1 GB stacks under an address-space limit with room for one
// of them (and the heap the started worker needs): the loader must then throw a zest::Error saying how
// many started, and the child exit normally.
TEST(LoaderErrors, WorkersThatCannotStartAreAnError) {
  ScratchDir dir("loader-threads");
  synth_small(dir.path(), "unet_tiny", 4, 4);
  auto dataset = open_dataset(dir.path());
  std::ifstream status_file("/proc/self/status");
  rlim_t mapped_kb = 0;
  for (std::string line; std::getline(status_file, line);)
    if (line.rfind("VmSize:", 0) == 0) mapped_kb = std::stoull(line.substr(7));
  ASSERT_GT(mapped_kb, 0u);
  const rlim_t room = (mapped_kb << 10) + (1536ull << 20);  // what is mapped now + 1.5 GB
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    pthread_attr_t big_stacks;
    ::pthread_attr_init(&big_stacks);
    ::pthread_attr_setstacksize(&big_stacks, 1ull << 30);
    ::pthread_setattr_default_np(&big_stacks);
    const rlimit limit{room, room};
    ::setrlimit(RLIMIT_AS, &limit);
    try {
      DataLoader loader(dataset, DistributedSampler(dataset->size(), 0, 1), LoaderOptions{.batch_size = 1, .num_workers = 8});
      ::_exit(3);  // every thread started: the limit did not bite
    } catch (const Error& e) {
      ::_exit(std::string(e.what()).find("data loader: could start only") != std::string::npos ? 0 : 4);
    } catch (...) {
      ::_exit(5);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "the loader took the process down (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: no failure to provoke, 4: another message, 5: another exception";
}

}  // namespace
}  // namespace zest::testing
