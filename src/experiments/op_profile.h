#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvlab {

// Time spent in each libtorch operator (and in each named scope, `RECORD_USER_SCOPE`) while
// `work` ran, from libtorch's own CPU profiler. Self time is an op's time minus the time of the
// ops it called; summed over the top-level events it accounts for the whole of the work the
// profiler saw. The profiler adds about a microsecond per op, so the profile is of a separate,
// untimed run.
struct OpTime {
  std::string name;
  int64_t calls = 0;
  double self_us = 0;
  double total_us = 0;  // including the ops it called
};

struct OpProfile {
  double wall_us = 0;
  double traced_us = 0;  // inside some top-level op or scope: wall_us − traced_us ran outside all
  std::vector<OpTime> ops;  // largest self time first
};

OpProfile profile_ops(const std::function<void()>& work);

}  // namespace kvlab
