#pragma once

#include <cstddef>
#include <vector>

namespace kvlab {

// Memory for the dense layers' stored weights and their kernels' scratch (MatVecScratch): every
// array on a 64-byte cache line (the kernels load whole 64-byte vectors and AMX tile rows, and from
// the heap's 16-byte alignment each load straddled two lines: bf16 panels at one row of x measured
// ~5% slower so, and the AMX tiles' rows of x slower still: docs/kernels/dense-decode.md); arrays
// of kHugeWeightBytes and more on a 2 MiB boundary with transparent huge pages asked for (madvise,
// before the pages are first touched; advice only). A decode step streams every weight once, and on
// 4 KiB pages that is a page walk every 4 KiB: the dense products at batch 1 ran 1.08–1.14× as fast
// on huge pages (docs/kernels/dense-decode.md).
constexpr std::size_t kHugeWeightBytes = std::size_t{2} << 20;
void* allocate_weight_bytes(std::size_t bytes);
void free_weight_bytes(void* p, std::size_t bytes);

template <class T>
struct WeightAllocator {
  using value_type = T;

  WeightAllocator() = default;
  template <class U>
  WeightAllocator(const WeightAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator

  T* allocate(std::size_t n) { return static_cast<T*>(allocate_weight_bytes(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) { free_weight_bytes(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const WeightAllocator<U>&) const {
    return true;
  }
};

template <class T>
using WeightVector = std::vector<T, WeightAllocator<T>>;

}  // namespace kvlab
