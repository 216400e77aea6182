#include "kernels/huge_page_floats.h"

#include <sys/mman.h>

#include <new>

namespace kvlab {

HugePageFloats::HugePageFloats(int64_t n) : size_(n) {
  if (n <= 0) return;
  const size_t huge = size_t{2} << 20;
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + huge - 1) / huge * huge;
  data_.reset(static_cast<float*>(std::aligned_alloc(huge, bytes)));
  if (!data_) throw std::bad_alloc();
  madvise(data_.get(), bytes, MADV_HUGEPAGE);
}

}  // namespace kvlab
