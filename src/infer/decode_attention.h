#pragma once

#include <cstdint>
#include <memory>

#include "spec/attention_spec.h"
#include "spec/dtype.h"

namespace kvlab::nn {
class AttentionImpl;
}

namespace kvlab::infer {

class AttentionStep;

// The scratch widths, per batch row, a layer's decode step needs (DecodeModel sizes each
// array for the widest layer): projections, the kernel's queries and output, the absorbed
// output's expansion, and the widest slice RoPE turns.
struct ScratchWidths {
  int64_t proj_a = 0, proj_b = 0, proj_c = 0;
  int64_t query = 0, query_rope = 0, attended = 0, expanded = 0;
  int64_t rope = 0;
};

// One layer's attention in the decode step, one implementation per family
// (infer/<family>_decode.cpp), each holding its own weights copied out of the module (the
// projections in the weight dtype, the per-head absorbed maps and norms as f32): the queries in the
// form the kernel takes (absorbed for gva and mla), the rows of the batch's new tokens written to
// the cache by role, the kernel call, the output projection.
class DecodeAttention {
 public:
  virtual ~DecodeAttention() = default;

  virtual const AttentionSpec& spec() const = 0;
  virtual ScratchWidths scratch_widths() const = 0;
  // The bytes of weights one token's step reads in this layer (projections in their dtype,
  // absorbed maps and norms in f32).
  virtual int64_t weight_bytes() const = 0;
  // Normed inputs x [n][D] of the step's batch -> y [n][D]; allocates nothing.
  virtual void run(AttentionStep& step, int64_t layer, const float* x, float* y,
                   int64_t n) const = 0;
};

// The decode adapter of the module's family, its weights copied out (infer's one table of
// families), its projections stored in weight_dtype. Throws std::invalid_argument for a layer that
// cannot decode (the '+' variants).
std::unique_ptr<DecodeAttention> load_decode_attention(nn::AttentionImpl& module,
                                                       DType weight_dtype);

// The families' adapters (infer/<family>_decode.cpp), found through load_decode_attention.
#define KVLAB_ATTENTION_FAMILY(Name, id)                                         \
  std::unique_ptr<DecodeAttention> load_##id##_decode(nn::AttentionImpl& module, \
                                                      DType weight_dtype);
#include "spec/attention_families.def"

}  // namespace kvlab::infer
