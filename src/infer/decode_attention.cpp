#include "infer/decode_attention.h"

#include "nn/attention.h"

namespace kvlab::infer {

std::unique_ptr<DecodeAttention> load_decode_attention(nn::AttentionImpl& module,
                                                       DType weight_dtype) {
  switch (module.spec().family()) {
#define KVLAB_ATTENTION_FAMILY(Name, id) \
  case AttnFamily::k##Name:              \
    return load_##id##_decode(module, weight_dtype);
#include "spec/attention_families.def"
  }
  throw std::logic_error("attention family without a decode adapter");
}

}  // namespace kvlab::infer
