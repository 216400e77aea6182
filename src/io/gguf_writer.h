#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "spec/dtype.h"

namespace kvlab {

// GGUF version 3, the file format of llama.cpp (ggml's docs/gguf.md): "GGUF", version, tensor
// and key/value counts, the key/values, the tensor infos, then the tensor data, each tensor
// aligned to `general.alignment` (32) bytes from the start of the data section. Little-endian.
// Q8_0 and Q4_0: ggml's blocks of 32 elements along the innermost dimension (an f16 scale, then
// 32 int8, or 16 bytes of nibble pairs), 34 or 18 bytes a block; that dimension must be a multiple
// of 32.
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kBF16 = 30 };
// The kvlab dtype whose rows are a block type's bytes (q8_0, q4_0: the cache's converters write
// ggml's blocks); nothing for an element type.
std::optional<DType> ggml_block_dtype(GgmlType type);
// The bytes of a tensor of `shape` (outermost first) in `type`; throws std::invalid_argument for a
// block type whose innermost dimension is not a multiple of its block.
int64_t ggml_tensor_bytes(GgmlType type, const std::vector<int64_t>& shape);

// The metadata value types kvlab writes (GGUF's type ids: UINT32 4, INT32 5, FLOAT32 6, BOOL 7,
// STRING 8, ARRAY 9, UINT64 10).
using GgufValue = std::variant<uint32_t, int32_t, float, bool, std::string, uint64_t,
                               std::vector<std::string>, std::vector<int32_t>>;
uint32_t gguf_type_id(const GgufValue& value);  // ARRAY (9) for the vectors

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> shape;  // row-major, outermost first (PyTorch's order)
  std::string bytes;           // the data, numel × the type's size
};

class GgufWriter {
 public:
  static constexpr uint32_t kAlignment = 32;

  void add(const std::string& key, GgufValue value);
  // Throws std::invalid_argument when bytes.size() does not match the shape and type.
  void add_tensor(GgufTensor tensor);

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  // The offset of each tensor within the data section, in add_tensor order.
  std::vector<uint64_t> data_offsets() const;

  std::string serialize() const;
  void write(const std::string& path) const;  // serialize + an atomic write

 private:
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<GgufTensor> tensors_;
};

}  // namespace kvlab
