#include "spec/cache_layout.h"

namespace kvlab {

std::string_view decode_kernel_name(DecodeKernel kernel) {
  switch (kernel) {
    case DecodeKernel::kTwoStream:
      return "two-stream";
    case DecodeKernel::kOneStream:
      return "one-stream";
    case DecodeKernel::kReconstructKeys:
      return "reconstruct-keys";
    case DecodeKernel::kRecurrentState:
      return "recurrent-state";
    case DecodeKernel::kNone:
      return "none";
  }
  return "?";
}

std::string_view stream_role_name(StreamRole role) {
  switch (role) {
    case StreamRole::kKey:
      return "k";
    case StreamRole::kValue:
      return "v";
    case StreamRole::kContent:
      return "c";
    case StreamRole::kRope:
      return "kr";
  }
  return "?";
}

int64_t CacheLayout::stream_index(StreamRole role) const {
  for (size_t i = 0; i < streams.size(); ++i) {
    if (streams[i].role == role) return static_cast<int64_t>(i);
  }
  return -1;
}

const CacheStream* CacheLayout::find(StreamRole role) const {
  const int64_t i = stream_index(role);
  return i < 0 ? nullptr : &streams[static_cast<size_t>(i)];
}

std::string CacheLayout::key_pairs_problem() const {
  const CacheStream* key = find(StreamRole::kKey);
  if (kernel != DecodeKernel::kTwoStream || key == nullptr) {
    return "pairs orders the key stream of a two-stream cache; this layout has none";
  }
  if (dtype != DType::kBf16) {
    return "pairs needs a bf16 cache, got " + std::string(dtype_name(dtype));
  }
  if (key->head_width % 2 != 0) {
    return "pairs needs an even key width, got " + std::to_string(key->head_width);
  }
  return "";
}

int64_t CacheLayout::scalars_per_token() const {
  int64_t scalars = 0;
  for (const CacheStream& stream : streams) scalars += stream.width();
  return scalars;
}

int64_t CacheLayout::bytes_per_token() const {
  int64_t bytes = 0;
  for (const CacheStream& stream : streams) bytes += token_row_bytes(stream);
  return bytes;
}

int64_t CacheLayout::state_bytes() const { return state_scalars * int64_t{sizeof(float)}; }

}  // namespace kvlab
