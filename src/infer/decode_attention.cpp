#include "infer/decode_attention.h"

#include "nn/attention.h"

namespace kvlab::infer {

std::unique_ptr<DecodeAttention> load_decode_attention(nn::AttentionImpl& module,
                                                       DType weight_dtype) {
  switch (module.spec().family()) {
    case AttnFamily::kStandard:
      return load_standard_decode(module, weight_dtype);
    case AttnFamily::kGva:
    case AttnFamily::kGta:
      return load_gva_decode(module, weight_dtype);
    case AttnFamily::kMla:
      return load_mla_decode(module, weight_dtype);
    case AttnFamily::kGla:
      return load_gla_decode(module, weight_dtype);
    case AttnFamily::kLinear:
      return load_linear_decode(module, weight_dtype);
  }
  throw std::logic_error("attention family without a decode adapter");
}

}  // namespace kvlab::infer
