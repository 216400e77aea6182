#include "io/atomic_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace kvlab {
namespace {

std::string fresh_path(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "kvlab-atomic-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name;
  std::filesystem::remove(path);
  return path;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(AppendLineTest, CreatesTheFileAndAppendsWholeLines) {
  const std::string path = fresh_path("records.jsonl");
  append_line(path, R"({"run": 1})");
  append_line(path, R"({"run": 2})");
  EXPECT_EQ(lines_of(path), (std::vector<std::string>{R"({"run": 1})", R"({"run": 2})"}));
  EXPECT_EQ(read_file(path, 1 << 10), "{\"run\": 1}\n{\"run\": 2}\n");
}

// Suites append from several runs at once: every line must land whole, none lost.
TEST(AppendLineTest, ConcurrentWritersNeverInterleave) {
  const std::string path = fresh_path("concurrent.jsonl");
  constexpr int kThreads = 4, kLines = 150;
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&path, t] {
      for (int i = 0; i < kLines; ++i) {
        // long enough (~1 KiB) that a split write would show
        append_line(path, std::to_string(t) + ":" + std::to_string(i) + ":" +
                              std::string(1000, static_cast<char>('a' + t)));
      }
    });
  }
  for (std::thread& w : writers) w.join();
  const std::vector<std::string> lines = lines_of(path);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLines));
  std::set<std::string> seen;
  for (const std::string& line : lines) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    ASSERT_NE(second, std::string::npos) << line.substr(0, 40);
    const int t = std::stoi(line.substr(0, first));
    EXPECT_EQ(line.substr(second + 1), std::string(1000, static_cast<char>('a' + t)));
    seen.insert(line.substr(0, second));
  }
  EXPECT_EQ(seen.size(), lines.size());
}

TEST(AppendLineTest, UnwritablePathNamesIt) {
  try {
    append_line("/nonexistent-folder/records.jsonl", "{}");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-folder/records.jsonl"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kvlab
