// `zest launch`: a failing rank stops the run within seconds and is named, output lines are prefixed
// with the rank, the torchrun-style environment is set, and signals are forwarded to the ranks.
#include "launch_test_util.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <thread>

namespace zest::testing {
namespace {

std::vector<std::string> launch(int n, const std::vector<std::string>& command, bool dashdash = true) {
  std::vector<std::string> argv{zest_binary(), "launch", "-n", std::to_string(n), "--grace", "2"};
  if (dashdash) argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

TEST(Launch, FailingRankStopsTheOthersAndIsNamed) {
  Child child(launch(3, {"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 3; fi; sleep 30"}));
  const int status = child.finish();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3) << child.output();
  EXPECT_LT(child.seconds(), 10.0) << "the surviving ranks were not stopped";
  EXPECT_NE(child.output().find("rank 1 failed with exit status 3"), std::string::npos) << child.output();
}

TEST(Launch, RankKilledBySignalIsNamed) {
  Child child(launch(2, {"/bin/sh", "-c", "if [ \"$RANK\" = 0 ]; then kill -SEGV $$; fi; sleep 30"}));
  const int status = child.finish();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGSEGV);
  EXPECT_NE(child.output().find("rank 0 failed with killed by SIGSEGV"), std::string::npos) << child.output();
}

// A rank's collective timed out but its error names no late rank (the store it asks stopped answering
// too): the launcher blames the rank it found stopped, and only for a collective timeout.
TEST(Launch, StoppedRankIsBlamedWhenTheTimedOutRankCannotNameIt) {
  const std::string timeout_error =
      "echo 'zest: error: Gloo allreduce did not complete within 3 s (engine.collective_timeout_s): the late "
      "rank(s) cannot be named' >&2; exit 1";
  const std::string other_error = "echo 'zest: error: the data folder is empty' >&2; exit 1";
  for (const std::string& error : {timeout_error, other_error}) {
    Child child(launch(3, {"/bin/sh", "-c",
                           "if [ \"$RANK\" = 2 ]; then kill -STOP $$; fi; if [ \"$RANK\" = 0 ]; then sleep 1; " +
                               error + "; fi; sleep 30"}));
    const int status = child.finish();
    ASSERT_TRUE(WIFEXITED(status)) << child.output();
    EXPECT_EQ(WEXITSTATUS(status), 1) << child.output();
    EXPECT_LT(child.seconds(), 10.0) << child.output();
    const bool blamed = child.output().find("zest launch: the fault is with rank 2 (it was stopped, e.g. by SIGSTOP, "
                                            "when rank 0 gave up waiting in a collective; see its error above)") !=
                        std::string::npos;
    EXPECT_EQ(blamed, error == timeout_error) << child.output();
    EXPECT_EQ(child.output().find("the fault is with rank 1"), std::string::npos) << child.output();
  }
}

TEST(Launch, OutputIsPrefixedAndTheEnvironmentIsSet) {
  const std::string script =
      "echo \"r=$RANK w=$WORLD_SIZE l=$LOCAL_RANK lw=$LOCAL_WORLD_SIZE a=$MASTER_ADDR p=$MASTER_PORT\"; "
      "echo \"err-$RANK\" >&2; printf 'no newline'";
  for (bool dashdash : {true, false}) {
    Child child(launch(2, {"/bin/sh", "-c", script}, dashdash));
    const int status = child.finish();
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << child.output();
    const std::string& out = child.output();
    std::set<std::string> ports;
    for (int r = 0; r < 2; ++r) {
      const std::regex line("\\[rank " + std::to_string(r) + "\\] r=" + std::to_string(r) +
                            " w=2 l=" + std::to_string(r) + " lw=2 a=127\\.0\\.0\\.1 p=([0-9]+)\\n");
      std::smatch m;
      ASSERT_TRUE(std::regex_search(out, m, line)) << out;
      ports.insert(m[1]);
      EXPECT_NE(out.find("[rank " + std::to_string(r) + "] err-" + std::to_string(r) + "\n"), std::string::npos);
      EXPECT_NE(out.find("[rank " + std::to_string(r) + "] no newline\n"), std::string::npos);
    }
    EXPECT_EQ(ports.size(), 1u) << "ranks disagree on MASTER_PORT";
    EXPECT_GT(std::stoi(*ports.begin()), 0);
  }
}

TEST(Launch, SignalIsForwardedOnceAndASecondOneKills) {
  // Each rank traps SIGINT once and exits 0 (a clean stop, as zest train does on preemption).
  const std::string graceful = "trap 'echo stopping; exit 0' INT; echo ready; while true; do sleep 0.05; done";
  {
    Child child(launch(2, {"/bin/sh", "-c", graceful}));
    ASSERT_TRUE(child.read_until("[rank 0] ready") && child.read_until("[rank 1] ready")) << child.output();
    ::kill(child.pid(), SIGINT);
    const int status = child.finish();
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << child.output();
    EXPECT_NE(child.output().find("[rank 0] stopping"), std::string::npos) << child.output();
    EXPECT_NE(child.output().find("[rank 1] stopping"), std::string::npos) << child.output();
  }
  // Ranks that ignore SIGTERM: the second signal kills them.
  const std::string stubborn = "trap 'echo ignoring' TERM; echo ready; while true; do sleep 0.05; done";
  Child child(launch(2, {"/bin/sh", "-c", stubborn}));
  ASSERT_TRUE(child.read_until("[rank 0] ready") && child.read_until("[rank 1] ready")) << child.output();
  ::kill(child.pid(), SIGTERM);
  ASSERT_TRUE(child.read_until("ignoring")) << child.output();
  ::kill(child.pid(), SIGTERM);
  const int status = child.finish();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGKILL) << child.output();
  EXPECT_LT(child.seconds(), 10.0);
}

// A command that cannot run is refused before any rank starts, naming it and the reason.
TEST(Launch, MissingCommandIsAnError) {
  for (const auto& [command, reason] : std::vector<std::pair<std::string, std::string>>{
           {"/nonexistent/program", "No such file or directory"},
           {"/tmp", "it is a folder"},
           {"no-such-zest-command-43", "no executable of that name in PATH"}}) {
    Child child({zest_binary(), "launch", "-n", "2", "--", command});
    const int status = child.finish();
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 1) << child.output();
    EXPECT_NE(child.output().find("zest launch: cannot run the command '" + command + "': " + reason), std::string::npos)
        << child.output();
    EXPECT_EQ(child.output().find("[rank"), std::string::npos) << "a rank was started: " << child.output();
  }
}

TEST(Launch, HostListsRefuseZeroSlots) {
  for (const std::string hosts : {"node1:0", "node1:2,node2:0", "node1:-1", "node1:x"}) {
    Child child({zest_binary(), "launch", "-H", hosts, "--", "true"});
    const int status = child.finish();
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_NE(WEXITSTATUS(status), 0) << hosts;
    EXPECT_NE(child.output().find("is not HOST or HOST:SLOTS with SLOTS >= 1"), std::string::npos) << child.output();
  }
}

}  // namespace
}  // namespace zest::testing
