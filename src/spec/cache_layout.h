#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spec/dtype.h"
#include "spec/key_order.h"

namespace kvlab {

// Which decode kernel shape serves a variant (DESIGN.md "Two kernel shapes").
enum class DecodeKernel {
  kTwoStream,        // cached K and V
  kOneStream,        // one content stream C used as key and value (+ optional shared rope)
  kReconstructKeys,  // gva dr=0: rebuild K_h = RoPE(V M_h) for every cached position
  kRecurrentState,   // linear attention: a constant-size state instead of a cache
  kNone,             // non-causal variants: nothing is cached
};

std::string_view decode_kernel_name(DecodeKernel kernel);

// What a cached stream holds. Decode parameters, benchmarks and tests find a stream by its
// role, never by its position in the layout.
enum class StreamRole {
  kKey,      // "k": key rows, one per group (two-stream)
  kValue,    // "v": value rows, one per group (two-stream)
  kContent,  // "c": one row per group used as key and value (shared K=V, gva's values, mla's
             // latent)
  kRope,     // "kr": the decoupled RoPE key, one row shared by all heads (gva, mla)
};

std::string_view stream_role_name(StreamRole role);

// One stream of cached rows: per token per layer it holds n_heads rows of head_width.
struct CacheStream {
  StreamRole role = StreamRole::kKey;
  int64_t n_heads = 0;
  int64_t head_width = 0;

  std::string_view name() const { return stream_role_name(role); }
  int64_t width() const { return n_heads * head_width; }
  bool operator==(const CacheStream&) const = default;
};

// What one layer keeps per sequence. Derived from an AttentionSpec only
// (AttentionSpec::cache_layout()); the allocator, the calculator and the benchmarks all
// read it from there.
struct CacheLayout {
  DecodeKernel kernel = DecodeKernel::kNone;
  std::vector<CacheStream> streams;  // per token
  DType dtype = DType::kBf16;
  // the rope stream's dtype (gva, gta, mla, gla) where it is not `dtype`: bf16 under q8_0, q4_0
  // and fp8 unless the spec says otherwise (AttentionSpec::rope_cache_dtype)
  std::optional<DType> rope_dtype = std::nullopt;
  // linear attention: scalars of the recurrent state per sequence, kept in f32 whatever
  // the cache dtype, because it is a running sum over the whole sequence
  int64_t state_scalars = 0;
  // shared K=V with RoPE: the kernel rotates (and RMS-normalises) each cached row on read
  bool rope_on_read = false;
  bool norm_on_read = false;
  // the key stream's order inside a page (two-stream bf16 caches may take kTokenPairs)
  KeyOrder key_order = KeyOrder::kRows;

  // The position of the stream with `role` in `streams`, or -1 when the layout has none.
  int64_t stream_index(StreamRole role) const;
  const CacheStream* find(StreamRole role) const;

  DType stream_dtype(const CacheStream& stream) const {
    return stream.role == StreamRole::kRope ? rope_dtype.value_or(dtype) : dtype;
  }
  // Bytes of one head row of the stream, and of the stream's whole row of a token.
  int64_t head_row_bytes(const CacheStream& stream) const {
    return row_bytes(stream_dtype(stream), stream.head_width);
  }
  int64_t token_row_bytes(const CacheStream& stream) const {
    return stream.n_heads * head_row_bytes(stream);
  }

  // Why the keys may not be ordered by element pairs (KeyOrder::kTokenPairs), or "" where they
  // may: a two-stream bf16 cache whose key rows have an even width.
  std::string key_pairs_problem() const;
  bool takes_key_pairs() const { return key_pairs_problem().empty(); }

  int64_t scalars_per_token() const;
  int64_t bytes_per_token() const;  // scales included
  int64_t state_bytes() const;
  bool operator==(const CacheLayout&) const = default;
};

}  // namespace kvlab
