#include "kernels/weight_allocator.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>

namespace kvlab {
namespace {

constexpr std::size_t kPageBytes = 4096;
constexpr std::size_t round_up(std::size_t bytes, std::size_t to) {
  return (bytes + to - 1) / to * to;
}

}  // namespace

// From kHugeWeightBytes a mapping of its own, not the heap's: the heap hands back memory that
// earlier arrays (the f32 weights a conversion just released) had faulted in on 4 KiB pages,
// and advice does not change pages already there. The mapping is cut to start on a 2 MiB
// boundary; a tail short of a whole huge page stays on 4 KiB pages, so no array holds more than
// its own bytes rounded to 4 KiB.
void* allocate_weight_bytes(std::size_t bytes) {
  if (bytes < kHugeWeightBytes) return ::operator new (bytes, std::align_val_t{64});
  const std::size_t length = round_up(bytes, kPageBytes), total = length + kHugeWeightBytes;
  void* raw = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = round_up(start, kHugeWeightBytes);
  if (aligned > start) munmap(raw, aligned - start);
  const std::size_t tail = start + total - (aligned + length);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + length), tail);
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, length, MADV_HUGEPAGE);
  return p;
}

void free_weight_bytes(void* p, std::size_t bytes) {
  if (bytes < kHugeWeightBytes) {
    ::operator delete (p, std::align_val_t{64});
  } else {
    munmap(p, round_up(bytes, kPageBytes));
  }
}

}  // namespace kvlab
