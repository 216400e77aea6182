#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kvlab {

// The safetensors format (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON header, then the data buffer. Each tensor
// entry holds dtype, shape and data_offsets [begin, end) relative to the data buffer.
enum class StDtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

int64_t st_dtype_bytes(StDtype dtype);
std::string_view st_dtype_name(StDtype dtype);  // "F32", "BF16", ...

// Thrown for any file that breaks the format; the message names the file, the tensor and
// the rule, e.g. "model.safetensors: tensor 'w': data_offsets [0, 12) hold 12 bytes but
// shape [2, 2] of F32 needs 16".
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TensorInfo {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // offsets into the data buffer
  uint64_t end = 0;

  uint64_t nbytes() const { return end - begin; }
  int64_t numel() const;
};

// A parsed file that owns its bytes. Parsing checks what the reference implementation
// checks — header length ≤ 100 MB and inside the file, valid UTF-8 JSON object, offsets
// contiguous from 0 without gaps or overlaps, size == numel × dtype size (overflow-checked),
// last offset == data length — and also rejects duplicate names.
// read() maps the file (read-only, private): its tensors' bytes are paged in when used.
class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  static SafetensorsFile read(const std::string& path);
  static SafetensorsFile parse(std::string bytes, const std::string& source);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // sorted by name
  const TensorInfo* find(std::string_view name) const;
  // Throws SafetensorsError naming the tensor when it is missing.
  const TensorInfo& at(std::string_view name) const;
  const uint8_t* data(const TensorInfo& tensor) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& source() const { return source_; }

 private:
  static SafetensorsFile parse_view(std::shared_ptr<const char> owner, std::string_view bytes,
                                    const std::string& source);

  std::string source_;
  std::shared_ptr<const char> storage_;  // keeps bytes_ alive: a string or a mapping
  std::string_view bytes_;
  uint64_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  uint64_t nbytes = 0;  // must equal numel × dtype size
};

// Serialises tensors: header padded with spaces to a multiple of 8, tensors ordered by
// element size (largest first) then name, so every tensor starts aligned to its element.
std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                  const std::map<std::string, std::string>& metadata);
// serialize_safetensors + an atomic write (temporary file and rename).
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace kvlab
