// Data-parallel training over c10d/Gloo, through the real program: ranks are processes.
#include "train/data_parallel.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "harness/process.h"
#include "nn/checkpoint.h"

namespace kvlab::train {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const std::string dir = (fs::temp_directory_path() / ("kvlab_ddp_" + name)).string();
  fs::remove_all(dir);
  return dir;
}

// A port per test and process, so parallel ctest runs do not meet at one TCPStore.
int test_port(int offset) { return 30000 + static_cast<int>(::getpid() % 5000) * 4 + offset; }

// The launcher's command lines redirect and chain: they go through sh (the harness's real exec).
int shell(const std::string& command) {
  test::Invocation sh;
  sh.args = {"-c", command};
  return test::run_exec("/bin/sh", sh).exit_code;
}

using test::slurp;

double max_parameter_difference(const std::string& a, const std::string& b) {
  nn::TransformerModel x = nn::load_model(a + "/checkpoint");
  nn::TransformerModel y = nn::load_model(b + "/checkpoint");
  const auto px = x->named_parameters(), py = y->named_parameters();
  EXPECT_EQ(px.size(), py.size());
  double worst = 0;
  for (const auto& item : px) {
    worst = std::max(worst, (item.value() - py[item.key()]).abs().max().item<double>());
  }
  return worst;
}

// 2 ranks at global batch B end where 1 process at batch B ends: same batches, averaged
// gradients, same steps — with and without gradient accumulation.
TEST(DataParallelTest, TwoRanksEqualOneProcessAtTheSameGlobalBatch) {
  for (const char* accumulation : {"1", "2"}) {
    SCOPED_TRACE(std::string("accumulation ") + accumulation);
    const std::string one = fresh_dir(std::string("one") + accumulation);
    const std::string two = fresh_dir(std::string("two") + accumulation);
    const std::string train = std::string(" train --task sort --attn q-kv --pos sinusoidal ") +
                              "--steps 12 --batch 16 --accum " + accumulation +
                              " --threads 1 --no-progress ";
    ASSERT_EQ(shell(std::string(KVLAB_BIN) + train + "--out " + one + " > /dev/null 2>&1"), 0);
    ASSERT_EQ(shell(std::string(KVLAB_BIN) + " launch --nproc 2 --master-port " +
                    std::to_string(test_port(0)) + " -- " + KVLAB_BIN + train + "--out " + two +
                    " > /dev/null 2> " + two + ".err"),
              0)
        << slurp(two + ".err");
    EXPECT_LT(max_parameter_difference(one, two), 2e-5);
    // rank 0 alone logged, one record per step plus the final evaluation, and its loss and
    // gradient norm are the global batch's (Adam would hide gradients summed, not averaged:
    // the norm does not)
    std::ifstream log_one(one + "/log.jsonl"), log_two(two + "/log.jsonl");
    int lines = 0;
    for (std::string a, b; std::getline(log_one, a) && std::getline(log_two, b);) {
      ++lines;
      const nlohmann::json x = nlohmann::json::parse(a), y = nlohmann::json::parse(b);
      for (const char* key : {"loss", "grad_norm", "eval_loss"}) {
        if (!x.contains(key)) continue;
        EXPECT_NEAR(x[key].get<double>(), y[key].get<double>(), 1e-4 * x[key].get<double>())
            << key << " at line " << lines;
      }
    }
    EXPECT_EQ(lines, 13);
  }
}

// Killing one rank ends the other with a clear error, well within the timeout.
TEST(DataParallelTest, AKilledRankStopsTheOtherWithAnError) {
  const std::string dir = fresh_dir("kill");
  const std::string port = std::to_string(test_port(1));
  pid_t ranks[2];
  for (int rank = 0; rank < 2; ++rank) {
    ranks[rank] = ::fork();
    ASSERT_GE(ranks[rank], 0);
    if (ranks[rank] == 0) {
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", "2", 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::setenv("KVLAB_DIST_TIMEOUT_S", "30", 1);
      const std::string err = dir + ".rank" + std::to_string(rank) + ".err";
      if (std::freopen(err.c_str(), "w", stderr) == nullptr) ::_exit(126);
      if (std::freopen("/dev/null", "w", stdout) == nullptr) ::_exit(126);
      ::execl(KVLAB_BIN, KVLAB_BIN, "train", "--task", "copy", "--steps", "1000000", "--batch", "8",
              "--threads", "1", "--no-progress", "--out", dir.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  // wait until training runs (rank 0 logs steps), then kill rank 1 outright
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (slurp(dir + "/log.jsonl").size() < 200 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(slurp(dir + "/log.jsonl").size(), 200u) << slurp(dir + ".rank0.err");
  ::kill(ranks[1], SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  int status = 0;
  pid_t done = 0;
  while ((done = ::waitpid(ranks[0], &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - killed < std::chrono::seconds(45)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (done == 0) ::kill(ranks[0], SIGKILL);
  ::waitpid(ranks[1], nullptr, 0);
  ASSERT_EQ(done, ranks[0]) << "rank 0 still running 45 s after rank 1 died";
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(seconds, 35.0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  const std::string err = slurp(dir + ".rank0.err");
  EXPECT_NE(err.find("rank 0 of 2"), std::string::npos) << err;
  EXPECT_NE(err.find("failed"), std::string::npos) << err;
}

TEST(DataParallelTest, BadEnvironmentNamesTheVariable) {
  const std::string k = KVLAB_BIN;
  const std::string train = " train --task copy --steps 1 --out " + fresh_dir("env") + " 2>&1";
  const std::pair<std::string, std::string> cases[] = {
      {"WORLD_SIZE=2 RANK=5 MASTER_ADDR=127.0.0.1 MASTER_PORT=1", "RANK"},
      {"WORLD_SIZE=2 RANK=0 MASTER_PORT=29999", "MASTER_ADDR"},
      {"WORLD_SIZE=x RANK=0", "WORLD_SIZE"},
      {"WORLD_SIZE=2 RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=99999", "MASTER_PORT"},
  };
  for (const auto& [env, field] : cases) {
    test::Invocation sh;
    sh.args = {"-c", env + " " + k + train};
    const test::ProcessResult run = test::run_exec("/bin/sh", sh);
    EXPECT_EQ(run.exit_code, 2) << env;
    EXPECT_NE(run.out.find(field), std::string::npos) << env << ": " << run.out;
  }
  // launch forwards a rank's failure
  EXPECT_EQ(shell(k + " launch --nproc 2 --master-port " + std::to_string(test_port(2)) +
                  " -- kvlab train --task nosuch --out /tmp/x > /dev/null 2>&1"),
            2);
  EXPECT_EQ(shell(k + " launch --nproc 2 -- false"), 1);
  // a global batch that does not split over the ranks
  EXPECT_EQ(shell(k + " launch --nproc 2 --master-port " + std::to_string(test_port(3)) +
                  " -- kvlab train --task copy --batch 7 --steps 1 --out " + fresh_dir("odd") +
                  " > /dev/null 2>&1"),
            2);
}

}  // namespace
}  // namespace kvlab::train
