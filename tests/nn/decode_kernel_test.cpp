// The scalar decode kernel, fed the rows a module writes to a paged cache and the queries the
// module computes, reproduces the module's own forward pass: kernel == libtorch, every
// one- and two-stream variant, every cache dtype, partly filled pages, ragged batches.
#include <gtest/gtest.h>

#include "cache/decode_params.h"
#include "cache/paged_cache.h"
#include "kernels/convert.h"
#include "kernels/decode_attention.h"
#include "kernels/linear_attention_step.h"
#include "nn/attention.h"
#include "nn/gva_attention.h"
#include "nn/linear_attention.h"
#include "nn/nn_test_util.h"
#include "nn/standard_attention.h"

namespace kvlab::nn {
namespace {

using testing::max_abs_diff;
using testing::small_shape;

const torch::TensorOptions kF32 = torch::TensorOptions().dtype(torch::kFloat32);

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 1e-4;
    case DType::kF16:
      return 5e-3;
    default:
      return 3e-2;  // bf16 keeps 8 bits of mantissa
  }
}

TEST(DecodeKernelTest, ReferenceKernelEqualsTheModuleOnEveryStreamLayout) {
  const ModelShape rope = small_shape(PosScheme::kRope);
  const ModelShape learned = small_shape(PosScheme::kLearned);
  // yarn with DeepSeek's softmax factor: stretched frequencies, cos/sin × 1.2, scale × mscale²
  ModelShape yarn = rope;
  yarn.rope_scaling.kind = RopeScalingKind::kYarn;
  yarn.rope_scaling.factor = 4;
  yarn.rope_scaling.original_context = 8;
  yarn.rope_scaling.attention_factor = 1.2;
  yarn.rope_scaling.score_mscale = 0.7;
  const std::pair<const char*, ModelShape> cases[] = {
      {"q-gqa:2,knorm", yarn}, {"gva:2,dr=0", yarn},
      {"mla", yarn},           {"mha", rope},
      {"gqa:2", rope},         {"mqa", learned},
      {"qk-v", rope},          {"q-kv", learned},
      {"qkv1", rope},          {"q-gqa:2", rope},
      {"q-gqa:2,knorm", rope}, {"q-mqa,knorm", rope},
      {"gva:2,dr=4", rope},    {"gva:1,dr=2,qnorm", learned},
      {"gva:2,dr=0", rope},  // keys rebuilt per position: key_maps in the kernel
      {"gta:2", rope},         {"gta:1", learned},
      {"gla:hc=2", rope},      {"gla:hc=4,dc=6,dr=2", learned},
      {"mla", rope},           {"mla:dc=12,dr=4,dn=6,dv=2,dq=10", learned},
  };
  const int64_t lengths[] = {11, 7, 1};
  for (DType dtype : {DType::kF32, DType::kBf16, DType::kF16}) {
    for (const auto& [text, shape] : cases) {
      SCOPED_TRACE(std::string(text) + " " + std::string(dtype_name(dtype)));
      torch::manual_seed(30);
      const AttentionSpec spec = AttentionSpec::parse(text, shape, dtype);
      const CacheLayout layout = spec.cache_layout();
      auto module = make_attention(spec, kF32);
      torch::NoGradGuard no_grad;
      PagedKvCache cache(layout, /*n_layers=*/1, /*page_size=*/4, /*max_pages=*/16, /*max_seqs=*/3);
      const int64_t n_seqs = 3, H = spec.n_heads;
      const bool rebuild = layout.kernel == DecodeKernel::kReconstructKeys;
      const PageTable no_sequences;
      const DecodeParams shape_params = decode_params_for(spec, cache, 0, no_sequences);
      const int64_t key_width = shape_params.key_width, value_width = shape_params.value_width;
      const int64_t rope_width = shape_params.rope_width;
      const bool rope_stream = rope_width > 0;
      std::vector<torch::Tensor> q_rows, qr_rows, expected;
      double scale = 0;
      for (int64_t b = 0; b < n_seqs; ++b) {
        const int64_t len = lengths[b];
        const torch::Tensor x = torch::randn({1, len, 16}, kF32);
        const int32_t seq = cache.add_sequence();
        cache.append(seq, len);
        const std::vector<torch::Tensor> rows = module->cache_rows(x);
        for (size_t s = 0; s < rows.size(); ++s) {
          for (int64_t pos = 0; pos < len; ++pos) {
            const torch::Tensor row = rows[s][0][pos].contiguous();  // [heads, width]
            cache.store_token(0, static_cast<int64_t>(s), seq, pos, row.data_ptr<float>());
          }
        }
        const auto query = module->decode_query(x.narrow(1, len - 1, 1), len - 1);
        q_rows.push_back(query.q.reshape({H, key_width}));
        if (rope_stream) qr_rows.push_back(query.q_rope.reshape({H, rope_width}));
        scale = query.scale;
        expected.push_back(module->forward(x).narrow(1, len - 1, 1));
      }
      const torch::Tensor q = torch::stack(q_rows).contiguous();
      const torch::Tensor q_rope =
          rope_stream ? torch::stack(qr_rows).contiguous() : torch::Tensor();
      torch::Tensor out = torch::zeros({n_seqs, H, value_width}, kF32);
      const PageTable table = cache.page_table({0, 1, 2});
      DecodeParams p = decode_params_for(spec, cache, 0, table);
      p.q = q.data_ptr<float>();
      p.q_rope = rope_stream ? q_rope.data_ptr<float>() : nullptr;
      EXPECT_FLOAT_EQ(p.scale, static_cast<float>(scale)) << "the module's score scale";
      torch::Tensor key_maps;
      if (rebuild) {
        key_maps = std::dynamic_pointer_cast<GvaAttentionImpl>(module)->key_maps.contiguous();
        p.key_maps = key_maps.data_ptr<float>();
      }
      if (layout.norm_on_read) {
        auto standard = std::dynamic_pointer_cast<StandardAttentionImpl>(module);
        p.norm_weight = standard->k_norm->weight.data_ptr<float>();
      }
      p.out = out.data_ptr<float>();
      decode_attention_reference(p);
      for (int64_t b = 0; b < n_seqs; ++b) {
        const torch::Tensor y = module->decode_output(out[b].view({1, 1, H, value_width}));
        EXPECT_LT(max_abs_diff(y, expected[static_cast<size_t>(b)]), tolerance(dtype))
            << "sequence " << b << " of length " << lengths[b];
      }
    }
  }
}

TEST(DecodeKernelTest, InconsistentParametersAreRejected) {
  DecodeParams p;
  EXPECT_THROW(decode_attention_reference(p), std::invalid_argument);
}

}  // namespace
}  // namespace kvlab::nn

namespace kvlab::nn {
namespace {

// The raw linear-attention step (its state is the cache) == the module's recurrent step.
TEST(DecodeKernelTest, LinearStepKernelEqualsTheModule) {
  torch::manual_seed(31);
  const AttentionSpec spec =
      AttentionSpec::parse("linear", testing::small_shape(PosScheme::kNone), DType::kF32);
  auto module = std::dynamic_pointer_cast<LinearAttentionImpl>(make_attention(spec, kF32));
  ASSERT_TRUE(module);
  torch::NoGradGuard no_grad;
  const int64_t H = spec.n_heads, d = spec.head_dim;
  LinearAttentionImpl::State state = module->initial_state(1, kF32);
  std::vector<float> raw_state(static_cast<size_t>(H * (d * d + d)), 0.0f);
  std::vector<float> out(static_cast<size_t>(H * d));
  for (int step = 0; step < 9; ++step) {
    const torch::Tensor x = torch::randn({1, 1, spec.d_model}, kF32);
    const torch::Tensor expected = module->step(x, state);                     // [1, 1, D]
    const torch::Tensor z = module->qkv_proj(x).reshape({H, d}).contiguous();  // [H, d]
    linear_step_reference({z.data_ptr<float>(), raw_state.data(), out.data(), 1, H, d});
    const torch::Tensor attended = torch::from_blob(out.data(), {1, 1, H * d}, kF32);
    EXPECT_LT(max_abs_diff(module->o_proj(attended), expected), 1e-5) << "step " << step;
  }
}

}  // namespace
}  // namespace kvlab::nn
