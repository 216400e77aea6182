#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

namespace kvlab {

// A float buffer that asks for transparent huge pages (madvise, before its pages are first
// touched; advice only). For large arrays read every decode step — tables, states — where 4 KiB
// pages cost a page walk every 4 KiB, nested ones in a virtual machine. Not zeroed.
class HugePageFloats {
 public:
  HugePageFloats() = default;
  explicit HugePageFloats(int64_t n);

  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  int64_t size() const { return size_; }

 private:
  std::unique_ptr<float, void (*)(void*)> data_{nullptr, std::free};
  int64_t size_ = 0;
};

}  // namespace kvlab
