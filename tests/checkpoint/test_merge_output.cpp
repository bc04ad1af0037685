// Where `merge -o` may write: never inside the checkpoint it reads (also through "..", symbolic links,
// or from a step folder of a root), never over a folder, FIFO, device or symbolic link (refused before
// anything is created, so no .tmp is left behind), and a write failure is an error that leaves neither
// the output nor its .tmp.
#include "ckpt_test_util.h"
#include "thread_world.h"

#include "checkpoint/output_path.h"
#include "formats/safetensors.h"

#include <gtest/gtest.h>

#include <mpi.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

namespace zest::testing {
namespace {
namespace fs = std::filesystem;

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Regular files in `dir` (recursively) whose name ends in ".tmp".
std::vector<std::string> tmp_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".tmp") out.push_back(e.path().string());
  return out;
}

class MergeOutput : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {
      ToyRun run = make_toy_run(comm, {2, false, 7});
      train_toy(run, 0, 3);
      checkpoint::save(*run.engine, toy_save_request(root_.sub("ckpt")));
    });
    step_dir_ = root_.sub("ckpt/step_00000003");
  }

  void expect_merge_refused(const std::string& from, const std::string& out, const std::vector<std::string>& parts) {
    const std::string rank0 = step_dir_ + "/rank_00000.safetensors";
    const std::string before = file_bytes(rank0);
    expect_error([&] { checkpoint::merge_offline(from, out, {}); }, parts);
    EXPECT_EQ(file_bytes(rank0), before) << out;
    EXPECT_EQ(tmp_files(root_.path()), std::vector<std::string>{}) << out;
  }

  TempDir root_{"merge_out"};
  std::string step_dir_;
};

TEST_F(MergeOutput, InsideTheCheckpointIsRefused) {
  const std::string ckpt = root_.sub("ckpt");
  expect_merge_refused(ckpt, step_dir_ + "/rank_00000.safetensors", {"is inside the checkpoint folder " + ckpt});
  expect_merge_refused(ckpt, ckpt + "/model.safetensors", {"is inside the checkpoint folder"});
  expect_merge_refused(ckpt + "/latest", ckpt + "/step_00000003/../model.safetensors", {"inside the checkpoint"});
  expect_merge_refused(step_dir_, root_.sub("elsewhere/../ckpt/x.safetensors"), {"inside the checkpoint"});
  fs::create_directory_symlink(ckpt, root_.sub("link"));
  expect_merge_refused(ckpt, root_.sub("link/step_00000003/rank_00001.safetensors"), {"inside the checkpoint"});
  // A step folder outside any root protects only itself.
  fs::create_directories(root_.sub("lone"));
  fs::copy(step_dir_, root_.sub("lone/step_00000003"));
  expect_merge_refused(root_.sub("lone/step_00000003"), root_.sub("lone/step_00000003/m.safetensors"),
                       {"inside the checkpoint folder"});
  EXPECT_NO_THROW(checkpoint::merge_offline(root_.sub("lone/step_00000003"), root_.sub("lone/m.safetensors"), {}));
  EXPECT_NO_THROW(checkpoint::merge_offline(ckpt, root_.sub("out/model.safetensors"), {}));
}

TEST_F(MergeOutput, NonRegularTargetsAreRefusedBeforeAnythingIsWritten) {
  const std::string ckpt = root_.sub("ckpt");
  fs::create_directories(root_.sub("adir"));
  expect_merge_refused(ckpt, root_.sub("adir"), {"adir: the merge output would replace a folder"});
  expect_merge_refused(ckpt, root_.sub("adir/"), {"would replace a folder"});
  EXPECT_TRUE(fs::is_directory(root_.sub("adir")));
  ASSERT_EQ(::mkfifo(root_.sub("fifo").c_str(), 0644), 0);
  expect_merge_refused(ckpt, root_.sub("fifo"), {"fifo: the merge output would replace a FIFO"});
  EXPECT_TRUE(fs::is_fifo(root_.sub("fifo")));
  std::ofstream(root_.sub("target.safetensors")) << "keep me";
  fs::create_symlink(root_.sub("target.safetensors"), root_.sub("link.safetensors"));
  expect_merge_refused(ckpt, root_.sub("link.safetensors"), {"would replace a symbolic link"});
  EXPECT_EQ(file_bytes(root_.sub("target.safetensors")), "keep me");
  // A temporary name that is not a regular file is refused too (the merge would write through it).
  fs::create_directories(root_.sub("m.safetensors.tmp"));
  expect_merge_refused(ckpt, root_.sub("m.safetensors"),
                       {"m.safetensors.tmp: the merge output would replace a folder"});
  // Sharded output: one shard name taken by a folder stops the merge before any shard is written.
  fs::create_directories(root_.sub("sharded/model-00002-of-00004.safetensors"));
  checkpoint::MergeOptions sharded;
  sharded.shard_size_bytes = 1000;
  expect_error([&] { checkpoint::merge_offline(ckpt, root_.sub("sharded/model.safetensors"), sharded); },
               {"model-00002-of-00004.safetensors: the merge output would replace a folder"});
  EXPECT_EQ(std::distance(fs::directory_iterator(root_.sub("sharded")), fs::directory_iterator()), 1);
  // Devices are checked without merging (a regression must not be able to touch /dev/full).
  expect_error([] { checkpoint::check_output_target("/dev/full"); }, {"would replace a character device"});
  // An existing regular file is replaced.
  std::ofstream(root_.sub("old.safetensors")) << "old";
  EXPECT_NO_THROW(checkpoint::merge_offline(ckpt, root_.sub("old.safetensors"), {}));
  EXPECT_EQ(safetensors::load_file(root_.sub("old.safetensors")).size(), 14u);
}

// A disk that fills up mid-merge (a file size limit, in a forked child) fails the merge with the system's
// reason and leaves neither the output nor its .tmp.
TEST_F(MergeOutput, WriteFailureIsAnErrorAndLeavesNothing) {
  int mpi_initialized = 0;
  MPI_Initialized(&mpi_initialized);
  if (mpi_initialized) GTEST_SKIP() << "forks; not under mpirun";
  const std::string out = root_.sub("full/model.safetensors");
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead of killing
    const rlimit limit{2048, 2048};  // the merged file needs about 4 KB
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      checkpoint::merge_offline(root_.sub("ckpt"), out, {});
    } catch (const zest::Error& e) {
      const std::string message = e.what();
      ::_exit(message.find("File too large") != std::string::npos ? 0 : 2);
    }
    ::_exit(1);  // no error: the failure went unnoticed
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the merge succeeded, 2: the error did not say why";
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

}  // namespace
}  // namespace zest::testing
