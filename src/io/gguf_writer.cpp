#include "io/gguf_writer.h"

#include <cstring>
#include <stdexcept>

#include "io/atomic_file.h"
#include "spec/dtype.h"

namespace kvlab {
namespace {

template <typename T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64 Linux are little-endian
  out.append(bytes, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

uint64_t align_up(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

struct ValueWriter {
  std::string& out;
  void operator()(uint32_t v) const { put(out, v); }
  void operator()(int32_t v) const { put(out, v); }
  void operator()(float v) const { put(out, v); }
  void operator()(bool v) const { put<uint8_t>(out, v ? 1 : 0); }
  void operator()(const std::string& v) const { put_string(out, v); }
  void operator()(uint64_t v) const { put(out, v); }
  void operator()(const std::vector<std::string>& v) const {
    put<uint32_t>(out, 8);  // STRING
    put<uint64_t>(out, v.size());
    for (const std::string& s : v) put_string(out, s);
  }
  void operator()(const std::vector<int32_t>& v) const {
    put<uint32_t>(out, 5);  // INT32
    put<uint64_t>(out, v.size());
    for (const int32_t x : v) put(out, x);
  }
};

}  // namespace

std::optional<DType> ggml_block_dtype(GgmlType type) {
  if (type == GgmlType::kQ8_0) return DType::kQ8_0;
  if (type == GgmlType::kQ4_0) return DType::kQ4_0;
  return std::nullopt;
}

int64_t ggml_tensor_bytes(GgmlType type, const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (const int64_t d : shape) numel *= d;
  switch (type) {
    case GgmlType::kF32:
      return numel * 4;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return numel * 2;
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0: {
      const DType dtype = *ggml_block_dtype(type);
      const int64_t inner = shape.empty() ? 1 : shape.back();
      if (inner % kQuantBlockElements != 0) {
        throw std::invalid_argument(std::string(dtype_name(dtype)) +
                                    " needs the innermost dimension to be a multiple of 32, not " +
                                    std::to_string(inner));
      }
      return numel / inner * row_bytes(dtype, inner);  // the cache's rows of that dtype
    }
  }
  throw std::invalid_argument("unknown GGML type " + std::to_string(static_cast<uint32_t>(type)));
}

uint32_t gguf_type_id(const GgufValue& value) {
  constexpr uint32_t kIds[] = {4, 5, 6, 7, 8, 10, 9, 9};
  return kIds[value.index()];
}

void GgufWriter::add(const std::string& key, GgufValue value) {
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(GgufTensor tensor) {
  if (static_cast<int64_t>(tensor.bytes.size()) != ggml_tensor_bytes(tensor.type, tensor.shape)) {
    throw std::invalid_argument("GGUF tensor '" + tensor.name +
                                "': " + std::to_string(tensor.bytes.size()) +
                                " bytes do not match its shape and type");
  }
  tensors_.push_back(std::move(tensor));
}

std::vector<uint64_t> GgufWriter::data_offsets() const {
  std::vector<uint64_t> offsets;
  uint64_t offset = 0;
  for (const GgufTensor& t : tensors_) {
    offsets.push_back(offset);
    offset = align_up(offset + t.bytes.size(), kAlignment);
  }
  return offsets;
}

std::string GgufWriter::serialize() const {
  std::string out = "GGUF";
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    put_string(out, key);
    put<uint32_t>(out, gguf_type_id(value));
    std::visit(ValueWriter{out}, value);
  }
  const std::vector<uint64_t> offsets = data_offsets();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const GgufTensor& t = tensors_[i];
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    // ggml lists dimensions innermost first
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d)
      put<uint64_t>(out, static_cast<uint64_t>(*d));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offsets[i]);
  }
  out.resize(align_up(out.size(), kAlignment), '\0');
  const size_t data_start = out.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    out.resize(data_start + offsets[i], '\0');
    out += tensors_[i].bytes;
  }
  return out;
}

void GgufWriter::write(const std::string& path) const { write_file_atomic(path, serialize()); }

}  // namespace kvlab
