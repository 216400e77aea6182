#include "kernels/process_memory.h"

#include <malloc.h>

#include <cstdint>

namespace kvlab {
namespace {

constexpr int kMmapThresholdBytes = 32 << 20;  // glibc's maximum (DEFAULT_MMAP_THRESHOLD_MAX)
constexpr int kTrimThresholdBytes = 1 << 30;   // freed heap top kept up to 1 GiB
constexpr int kTopPadBytes = 64 << 20;         // grow the heap in steps of 64 MiB more

}  // namespace

bool keep_freed_memory_for_reuse() {
  bool ok = ::mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes) == 1;
  ok = ::mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes) == 1 && ok;
  ok = ::mallopt(M_TOP_PAD, kTopPadBytes) == 1 && ok;
  return ok;
}

std::string glibc_tunables_for_reuse() {
  return "glibc.malloc.mmap_threshold=" + std::to_string(kMmapThresholdBytes) +
         ":glibc.malloc.trim_threshold=" + std::to_string(kTrimThresholdBytes) +
         ":glibc.malloc.top_pad=" + std::to_string(kTopPadBytes);
}

}  // namespace kvlab
