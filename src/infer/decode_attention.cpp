#include "infer/decode_attention.h"

#include "nn/attention.h"

namespace kvlab::infer {

std::unique_ptr<DecodeAttention> load_decode_attention(nn::AttentionImpl& module) {
  switch (module.spec().family()) {
    case AttnFamily::kStandard:
      return load_standard_decode(module);
    case AttnFamily::kGva:
    case AttnFamily::kGta:
      return load_gva_decode(module);
    case AttnFamily::kMla:
      return load_mla_decode(module);
    case AttnFamily::kGla:
      return load_gla_decode(module);
    case AttnFamily::kLinear:
      return load_linear_decode(module);
  }
  throw std::logic_error("attention family without a decode adapter");
}

}  // namespace kvlab::infer
