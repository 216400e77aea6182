// gla (grouped latent attention): with one latent head it is MLA with the same widths, a module
// written separately; with more, each latent head serves only its own query heads.
#include <gtest/gtest.h>

#include "nn/attention.h"
#include "nn/gla_attention.h"
#include "nn/mla_attention.h"
#include "nn/nn_test_util.h"

namespace kvlab::nn {
namespace {

using testing::copy_into;
using testing::kF64;
using testing::max_abs_diff;
using testing::small_shape;
using testing::spec_of;

TEST(GlaTest, OneLatentHeadEqualsMlaWithTheSameWidths) {
  torch::manual_seed(43);
  for (BiasKind bias : {BiasKind::kAll, BiasKind::kNone}) {
    const ModelShape shape = small_shape(PosScheme::kRope, ModelKind::kDecoder, bias);
    SCOPED_TRACE(bias_kind_name(bias));
    auto gla = std::dynamic_pointer_cast<GlaAttentionImpl>(
        make_attention(spec_of("gla:hc=1,dc=8,dr=2", shape), kF64));
    auto mla = std::dynamic_pointer_cast<MlaAttentionImpl>(
        make_attention(spec_of("mla:dc=8,dr=2", shape), kF64));
    ASSERT_TRUE(gla && mla);
    EXPECT_EQ(gla->spec().param_count(), mla->spec().param_count());
    EXPECT_EQ(gla->spec().cache_layout().bytes_per_token(),
              mla->spec().cache_layout().bytes_per_token());
    auto copy_linear = [](const Linear& to, const Linear& from) {
      copy_into(to->weight, from->weight);
      if (from->bias.defined()) copy_into(to->bias, from->bias);
    };
    copy_linear(mla->q_proj, gla->q_proj);
    copy_linear(mla->kv_a_proj_with_mqa, gla->kv_a_proj);
    copy_linear(mla->kv_b_proj, gla->kv_b_proj);
    copy_linear(mla->o_proj, gla->o_proj);
    auto mla_norm = mla->kv_a_layernorm->named_parameters();
    for (const auto& item : gla->kv_a_layernorm->named_parameters()) {
      copy_into(mla_norm[item.key()], item.value());
    }
    const torch::Tensor x = torch::randn({2, 9, 16}, kF64);
    EXPECT_LT(max_abs_diff(gla->forward(x, 2), mla->forward(x, 2)), 1e-12);
    // the cached forms: gla's one row [c ; k^rope] is mla's two streams side by side
    const std::vector<torch::Tensor> gla_rows = gla->cache_rows(x, 0);
    const std::vector<torch::Tensor> mla_rows = mla->cache_rows(x, 0);
    ASSERT_EQ(gla_rows.size(), 1u);
    EXPECT_LT(max_abs_diff(gla_rows[0], torch::cat(mla_rows, -1)), 1e-12);
    EXPECT_LT(max_abs_diff(gla->forward_from_cache(x.narrow(1, 5, 4), gla_rows, 5),
                           mla->forward(x, 0).narrow(1, 5, 4)),
              1e-12);
  }
}

// Head h may only see latent head h / (H/C): changing another latent head's input weights
// leaves it unchanged, changing its own does not.
TEST(GlaTest, EachQueryHeadReadsOnlyItsOwnLatentHead) {
  torch::manual_seed(44);
  const ModelShape shape = small_shape(PosScheme::kRope);  // H 4
  auto gla = std::dynamic_pointer_cast<GlaAttentionImpl>(
      make_attention(spec_of("gla:hc=2,dc=6,dr=2", shape), kF64));
  const torch::Tensor x = torch::randn({1, 7, 16}, kF64);
  torch::Tensor identity = torch::eye(16, kF64);
  copy_into(gla->o_proj->weight, identity);  // output channel block h = head h's value
  const torch::Tensor before = gla->forward(x);
  {
    torch::NoGradGuard no_grad;
    torch::Tensor rows = gla->kv_a_proj->weight.narrow(0, 8, 8);  // latent head 1: [8, 16)
    rows.add_(torch::randn_like(rows));
  }
  const torch::Tensor after = gla->forward(x);
  // heads 0 and 1 (channels 0..7) read latent head 0; heads 2 and 3 read latent head 1
  EXPECT_LT(max_abs_diff(before.narrow(-1, 0, 8), after.narrow(-1, 0, 8)), 1e-12);
  EXPECT_GT(max_abs_diff(before.narrow(-1, 8, 8), after.narrow(-1, 8, 8)), 1e-3);
}

}  // namespace
}  // namespace kvlab::nn
