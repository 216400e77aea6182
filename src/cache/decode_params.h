#pragma once

#include <cstdint>

#include "cache/paged_cache.h"
#include "kernels/decode_attention.h"
#include "spec/attention_spec.h"

namespace kvlab {

// The one map from a spec and a cache to a decode call: for `layer` of `cache` (laid out by
// spec.cache_layout()) and the sequences of `table`, the pools found by stream role (key,
// value, content, rope), heads, groups and widths (gva dr=0 rebuilds keys of d_n), dtype, score
// scale 1/sqrt(qk_dim), RoPE base and the rotate-on-read flag. The caller adds what belongs to
// the step and the layer's weights: q (and q_rope when rope_width > 0), out, norm_weight (when
// the layout normalises on read), key_maps (when keys are rebuilt) and the precision. Used by
// the decode runtime, the benchmarks and the tests alike; `table` must outlive the call.
// Allocates nothing. Throws CacheError when the layout has no rows for a decode kernel.
DecodeParams decode_params_for(const AttentionSpec& spec, const PagedKvCache& cache, int64_t layer,
                               const PageTable& table);

}  // namespace kvlab
