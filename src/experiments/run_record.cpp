#include "experiments/run_record.h"

#include <algorithm>
#include <string>
#include <thread>

#include "experiments/build_commit.h"
#include "kernels/compute_peak.h"
#include "kernels/fast_decoder.h"
#include "spec/version.h"

namespace kvlab {

nlohmann::json build_record() { return {{"version", kVersion}, {"commit", kBuildCommit}}; }

nlohmann::json machine_record() {
  return {{"cpu", cpu_model_name()},
          {"cores", std::max(1u, std::thread::hardware_concurrency())},
          {"kernel_isa", std::string(cpu_isa_name(detect_cpu_isa()))},
          {"avx512_bf16", cpu_has_avx512_bf16()}};
}

}  // namespace kvlab
