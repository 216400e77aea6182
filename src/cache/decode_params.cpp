#include "cache/decode_params.h"

#include <cmath>

namespace kvlab {

DecodeParams decode_params_for(const AttentionSpec& spec, const PagedKvCache& cache, int64_t layer,
                               const PageTable& table) {
  const CacheLayout& layout = cache.layout();
  const bool rebuild = layout.kernel == DecodeKernel::kReconstructKeys;
  const bool two = layout.kernel == DecodeKernel::kTwoStream;
  if (!two && layout.kernel != DecodeKernel::kOneStream && !rebuild) {
    throw CacheError(std::string(decode_kernel_name(layout.kernel)) +
                     " layout has no rows for a decode kernel");
  }
  const StreamRole key_role = two ? StreamRole::kKey : StreamRole::kContent;
  const StreamRole value_role = two ? StreamRole::kValue : StreamRole::kContent;
  const CacheStream* key = layout.find(key_role);
  const CacheStream* value = layout.find(value_role);
  const CacheStream* rope = layout.find(StreamRole::kRope);
  if (key == nullptr || value == nullptr) {
    throw CacheError("the cache layout lacks its " + std::string(stream_role_name(key_role)) +
                     " or " + std::string(stream_role_name(value_role)) + " stream");
  }
  DecodeParams p;
  p.key_pool = cache.pool(layer, layout.stream_index(key_role));
  p.value_pool = cache.pool(layer, layout.stream_index(value_role));
  p.rope_pool =
      rope != nullptr ? cache.pool(layer, layout.stream_index(StreamRole::kRope)) : nullptr;
  p.pages = table.view();
  p.n_seqs = table.n_seqs();
  p.n_heads = spec.n_heads;
  p.n_groups = key->n_heads;
  p.key_width = rebuild ? spec.nope_dim : key->head_width;
  p.value_width = value->head_width;
  p.rope_width = rope != nullptr ? rope->head_width : 0;
  p.dtype = layout.dtype;
  if (rope != nullptr) p.rope_dtype = layout.stream_dtype(*rope);
  p.scale = static_cast<float>(spec.softmax_scale());
  p.rope_theta = spec.rope_theta;
  p.rope_scaling = spec.rope_scaling;
  p.rope_on_read = layout.rope_on_read || rebuild;
  p.key_order = layout.key_order;
  return p;
}

}  // namespace kvlab
