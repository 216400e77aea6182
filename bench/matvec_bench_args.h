// What the hand-built matrix-vector benchmarks (bench/matvec_*_kernels.cpp) share: their
// arguments THREADS OUT IN [CYCLE_MB], each checked and named when out of range, and the timing.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

struct MatVecBenchArgs {
  int threads = 1;
  int64_t out = 0, in = 0;
  int64_t cycle_mb = 0;  // MB of matrices cycled through (0: one matrix reused)
};

// The arguments, or nothing after a usage line on stderr (`cpu_ok` false: the CPU lacks `needs`).
inline std::optional<MatVecBenchArgs> parse_matvec_bench_args(int argc, char** argv, bool cpu_ok,
                                                              const char* needs) {
  if ((argc != 4 && argc != 5) || !cpu_ok) {
    std::fprintf(stderr, "usage: %s THREADS OUT IN [CYCLE_MB] (needs %s)\n", argv[0], needs);
    return std::nullopt;
  }
  MatVecBenchArgs a;
  a.threads = std::atoi(argv[1]);
  a.out = std::atoll(argv[2]);
  a.in = std::atoll(argv[3]);
  a.cycle_mb = argc == 5 ? std::atoll(argv[4]) : 0;
  if (a.threads < 1 || a.threads > 256 || a.out < 1 || a.out > 65536 || a.in < 1 || a.in > 65536 ||
      a.cycle_mb < 0 || a.cycle_mb > 16384) {
    std::fprintf(
        stderr, "%s: THREADS 1..256, OUT and IN 1..65536, CYCLE_MB 0..16384 (got %s %s %s%s%s)\n",
        argv[0], argv[1], argv[2], argv[3], argc == 5 ? " " : "", argc == 5 ? argv[4] : "");
    return std::nullopt;
  }
  return a;
}

// The median of 9 timed calls of `run` after one untimed, in seconds.
template <class Run>
double median_seconds(Run&& run) {
  run();
  std::vector<double> seconds;
  for (int r = 0; r < 9; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[4];
}
