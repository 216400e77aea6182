#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "io/atomic_file.h"

namespace kvlab {
namespace {

using nlohmann::json;

struct DtypeName {
  StDtype dtype;
  std::string_view name;
  int64_t bytes;
};

constexpr DtypeName kDtypes[] = {
    {StDtype::kF64, "F64", 8},   {StDtype::kF32, "F32", 4}, {StDtype::kF16, "F16", 2},
    {StDtype::kBF16, "BF16", 2}, {StDtype::kI64, "I64", 8}, {StDtype::kI32, "I32", 4},
    {StDtype::kI16, "I16", 2},   {StDtype::kI8, "I8", 1},   {StDtype::kU8, "U8", 1},
    {StDtype::kBool, "BOOL", 1},
};

[[noreturn]] void fail(const std::string& source, const std::string& message) {
  throw SafetensorsError(source + ": " + message);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

int64_t st_dtype_bytes(StDtype dtype) {
  for (const DtypeName& d : kDtypes) {
    if (d.dtype == dtype) return d.bytes;
  }
  return 0;
}

std::string_view st_dtype_name(StDtype dtype) {
  for (const DtypeName& d : kDtypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile SafetensorsFile::read(const std::string& path) {
  // Mapped, not read: a shard of a published model is gigabytes, and each tensor's bytes are
  // touched once, when they are converted into the model.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw SafetensorsError("cannot open '" + path + "': " + std::strerror(errno));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    throw SafetensorsError("'" + path + "' is not a regular file");
  }
  const auto size = static_cast<size_t>(info.st_size);
  if (size == 0) {
    ::close(fd);
    return parse_view(nullptr, {}, path);
  }
  void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED) {
    throw SafetensorsError("cannot map '" + path + "': " + std::strerror(errno));
  }
  std::shared_ptr<const char> owner(static_cast<const char*>(mapped), [size](const char* p) {
    ::munmap(const_cast<char*>(p), size);
  });
  return parse_view(owner, std::string_view(owner.get(), size), path);
}

SafetensorsFile SafetensorsFile::parse(std::string bytes, const std::string& source) {
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  const std::string_view view(*owned);
  return parse_view(std::shared_ptr<const char>(owned, owned->data()), view, source);
}

SafetensorsFile SafetensorsFile::parse_view(std::shared_ptr<const char> owner,
                                            std::string_view bytes, const std::string& source) {
  SafetensorsFile file;
  file.source_ = source;
  if (bytes.size() < 8) {
    fail(source, "file of " + std::to_string(bytes.size()) +
                     " bytes is too short for the 8-byte header length");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  if (header_len > kMaxHeaderBytes) {
    fail(source, "header length " + std::to_string(header_len) + " exceeds the 100 MB limit");
  }
  if (header_len > bytes.size() - 8) {
    fail(source, "header length " + std::to_string(header_len) + " runs past the end of the " +
                     std::to_string(bytes.size()) + "-byte file");
  }
  const std::string_view header(bytes.data() + 8, header_len);
  if (header.empty() || header.front() != '{') fail(source, "header does not start with '{'");

  // nlohmann keeps the last of two equal keys silently: catch duplicates while parsing.
  std::set<std::string> names;
  std::string duplicate;
  json doc;
  try {
    doc = json::parse(header, [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key && duplicate.empty() &&
          !names.insert(parsed.get<std::string>()).second) {
        duplicate = parsed.get<std::string>();
      }
      return true;
    });
  } catch (const json::exception& e) {
    fail(source, std::string("header is not valid UTF-8 JSON: ") + e.what());
  }
  if (!duplicate.empty()) fail(source, "tensor '" + duplicate + "' appears twice in the header");
  if (!doc.is_object()) fail(source, "header is not a JSON object");

  for (const auto& [name, entry] : doc.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(source, "__metadata__ is not an object of strings");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail(source, "__metadata__ value of '" + key + "' is not a string");
        file.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!entry.is_object()) fail(source, where + ": entry is not an object");
    for (const auto& [key, unused] : entry.items()) {
      if (key != "dtype" && key != "shape" && key != "data_offsets") {
        fail(source, where + ": unknown field '" + key + "'");
      }
    }
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) {
      fail(source, where + ": missing dtype");
    }
    TensorInfo info;
    info.name = name;
    const std::string dtype = entry["dtype"].get<std::string>();
    bool known = false;
    for (const DtypeName& d : kDtypes) {
      if (d.name == dtype) {
        info.dtype = d.dtype;
        known = true;
      }
    }
    if (!known) fail(source, where + ": unsupported dtype '" + dtype + "'");
    if (!entry.contains("shape") || !entry["shape"].is_array()) {
      fail(source, where + ": missing shape");
    }
    for (const json& dim : entry["shape"]) {
      if (!dim.is_number_unsigned())
        fail(source, where + ": shape entries must be non-negative integers");
      const uint64_t d = dim.get<uint64_t>();
      if (d > static_cast<uint64_t>(INT64_MAX)) fail(source, where + ": dimension overflows");
      info.shape.push_back(static_cast<int64_t>(d));
    }
    const json& offsets = entry.contains("data_offsets") ? entry["data_offsets"] : json();
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      fail(source, where + ": data_offsets must be [begin, end] of non-negative integers");
    }
    info.begin = offsets[0].get<uint64_t>();
    info.end = offsets[1].get<uint64_t>();
    if (info.end < info.begin) fail(source, where + ": data_offsets end before they begin");
    uint64_t expected = static_cast<uint64_t>(st_dtype_bytes(info.dtype));
    for (int64_t d : info.shape) {
      if (__builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected)) {
        fail(source, where + ": shape " + shape_text(info.shape) + " overflows");
      }
    }
    if (expected != info.nbytes()) {
      fail(source, where + ": data_offsets [" + std::to_string(info.begin) + ", " +
                       std::to_string(info.end) + ") hold " + std::to_string(info.nbytes()) +
                       " bytes but shape " + shape_text(info.shape) + " of " + dtype + " needs " +
                       std::to_string(expected));
    }
    file.tensors_.push_back(std::move(info));
  }

  // Offsets must tile the data buffer exactly: contiguous from 0, no gaps, no overlaps.
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : file.tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t cursor = 0;
  for (const TensorInfo* t : by_offset) {
    if (t->begin != cursor) {
      fail(source, "tensor '" + t->name + "': data_offsets begin at " + std::to_string(t->begin) +
                       " but the previous tensor ends at " + std::to_string(cursor) +
                       (t->begin > cursor ? " (a gap)" : " (an overlap)"));
    }
    cursor = t->end;
  }
  file.data_start_ = 8 + header_len;
  const uint64_t data_len = bytes.size() - file.data_start_;
  if (cursor != data_len) {
    fail(source, "tensors cover " + std::to_string(cursor) + " bytes but the data buffer holds " +
                     std::to_string(data_len));
  }
  file.storage_ = std::move(owner);
  file.bytes_ = bytes;
  return file;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  for (const TensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const TensorInfo& SafetensorsFile::at(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (t == nullptr) fail(source_, "tensor '" + std::string(name) + "' is missing");
  return *t;
}

const uint8_t* SafetensorsFile::data(const TensorInfo& tensor) const {
  return reinterpret_cast<const uint8_t*>(bytes_.data()) + data_start_ + tensor.begin;
}

std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> order;
  std::set<std::string> names;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__" || !names.insert(t.name).second) {
      throw SafetensorsError("cannot write tensor name '" + t.name + "' (reserved or repeated)");
    }
    uint64_t expected = static_cast<uint64_t>(st_dtype_bytes(t.dtype));
    for (int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected)) {
        throw SafetensorsError("tensor '" + t.name + "': invalid shape " + shape_text(t.shape));
      }
    }
    if (expected != t.nbytes) {
      throw SafetensorsError("tensor '" + t.name + "': " + std::to_string(t.nbytes) +
                             " bytes given, shape needs " + std::to_string(expected));
    }
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](const TensorToWrite* a, const TensorToWrite* b) {
    const int64_t sa = st_dtype_bytes(a->dtype), sb = st_dtype_bytes(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite* t : order) {
    header[t->name] = {{"dtype", std::string(st_dtype_name(t->dtype))},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->nbytes}}};
    offset += t->nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xFF);
  out += text;
  out.reserve(out.size() + offset);
  for (const TensorToWrite* t : order) {
    if (t->nbytes > 0) out.append(static_cast<const char*>(t->data), t->nbytes);
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, serialize_safetensors(tensors, metadata));
}

}  // namespace kvlab
