#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace kvlab {

// GGUF version 3, the file format of llama.cpp (ggml's docs/gguf.md): "GGUF", version, tensor
// and key/value counts, the key/values, the tensor infos, then the tensor data, each tensor
// aligned to `general.alignment` (32) bytes from the start of the data section. Little-endian.
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kBF16 = 30 };
int64_t ggml_type_bytes(GgmlType type);

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
