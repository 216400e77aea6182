#include "experiments/op_profile.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <chrono>
#include <map>

namespace kvlab {

namespace {

namespace profiler = torch::autograd::profiler;

struct Open {
  const profiler::LegacyEvent* push;
  double children_us = 0;
};

}  // namespace

OpProfile profile_ops(const std::function<void()>& work) {
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::CPU);
  const auto start = std::chrono::steady_clock::now();
  profiler::enableProfilerLegacy(config);
  profiler::thread_event_lists lists;
  try {
    work();
  } catch (...) {
    (void)profiler::disableProfilerLegacy();
    throw;
  }
  lists = profiler::disableProfilerLegacy();
  OpProfile profile;
  profile.wall_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  // Each thread's events are pushes and pops in call order: a stack gives every op its
  // inclusive time and, by subtraction, its self time.
  std::map<std::string, OpTime> by_name;
  for (const auto& events : lists) {
    std::vector<Open> stack;
    for (const profiler::LegacyEvent& e : events) {
      if (e.kind() == profiler::EventKind::PushRange) {
        stack.push_back({&e});
      } else if (e.kind() == profiler::EventKind::PopRange && !stack.empty()) {
        const Open open = stack.back();
        stack.pop_back();
        const double total_us = open.push->cpuElapsedUs(e);
        OpTime& op = by_name[open.push->name()];
        op.name = open.push->name();
        ++op.calls;
        op.total_us += total_us;
        op.self_us += total_us - open.children_us;
        if (stack.empty()) {
          profile.traced_us += total_us;
        } else {
          stack.back().children_us += total_us;
        }
      }
    }
  }
  for (auto& [name, op] : by_name) profile.ops.push_back(std::move(op));
  std::sort(profile.ops.begin(), profile.ops.end(),
            [](const OpTime& a, const OpTime& b) { return a.self_us > b.self_us; });
  return profile;
}

}  // namespace kvlab
