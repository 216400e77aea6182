#include "spec/attention_spec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "spec/spec_error.h"
#include "spec/test_shapes.h"

namespace kvlab {
namespace {

using testing::rope_decoder;
using testing::tiny_encoder;
using testing::tiny_gpt;

struct RoundTripCase {
  std::string text;
  ModelShape model;
};

std::vector<RoundTripCase> every_variant() {
  const ModelShape rope = rope_decoder();
  const ModelShape learned = tiny_gpt();
  const ModelShape encoder = tiny_encoder();
  return {
      {"mha", rope},
      {"mha", learned},
      {"gqa:4", rope},
      {"gqa:1", rope},
      {"gqa:16", rope},
      {"mqa", rope},
      {"qk-v", learned},
      {"q-kv", learned},
      {"q-kv", rope},
      {"q-kv:knorm", rope},
      {"qkv1", rope},
      {"q-gqa:4", rope},
      {"q-gqa:8,knorm", rope},
      {"q-mqa", rope},
      {"qk-v+", encoder},
      {"qk-v+:m=12", encoder},
      {"qkv1+", encoder},
      {"mla", rope},
      {"mla:dc=512,dr=64", rope},
      {"mla:dc=96,dr=16,dn=48,dv=32,dq=128", rope},
      {"mla:dc=64,dr=16,plainlatent", rope},
      {"gva:4,dr=16", rope},
      {"gva:4,dr=24", rope},
      {"gva:8,dr=16,init=scale-matched,qnorm", rope},
      {"gva:2,dr=0", rope},
      {"gva:2,dr=0,init=variance-fixed", learned},
      {"gva:4,dr=16,dn=32", rope},
      {"gta:4", rope},
      {"gta:8,dr=16", rope},
      {"gta:2", learned},
      {"gla:hc=2", rope},
      {"gla:hc=4,dc=96,dr=16", rope},
      {"gla:hc=1", learned},
      {"linear", learned},
  };
}

TEST(AttentionSpecTest, ParsePrintRoundTripsForEveryVariant) {
  for (DType dtype :
       {DType::kF32, DType::kBf16, DType::kF16, DType::kFp8, DType::kQ8_0, DType::kQ4_0}) {
    for (const RoundTripCase& c : every_variant()) {
      SCOPED_TRACE(c.text);
      const AttentionSpec spec = AttentionSpec::parse(c.text, c.model, dtype);
      const std::string printed = spec.to_string();
      const AttentionSpec again = AttentionSpec::parse(printed, c.model, dtype);
      EXPECT_EQ(again, spec) << "printed as " << printed;
      EXPECT_EQ(again.to_string(), printed);
    }
  }
}

TEST(AttentionSpecTest, CanonicalTextFillsDefaultsAndOrdersOptions) {
  const ModelShape rope = rope_decoder(32, 128);
  auto canonical = [&](const char* text) {
    return AttentionSpec::parse(text, rope, DType::kBf16).to_string();
  };
  EXPECT_EQ(canonical("gva:8"), "gva:8,dr=16");
  EXPECT_EQ(canonical(" gva:8, qnorm , init=scale-matched ,dr=16 "),
            "gva:8,dr=16,init=scale-matched,qnorm");
  EXPECT_EQ(canonical("mla"), "mla:dc=512,dr=64");  // d_c = 4·d_h, d_r = d_h/2
  EXPECT_EQ(canonical("mla:dn=128,dv=128"), "mla:dc=512,dr=64");
  EXPECT_EQ(canonical("q-gqa:8,knorm"), "q-gqa:8,knorm");
  EXPECT_EQ(canonical("q-kv,knorm"), "q-kv:knorm");
  EXPECT_EQ(AttentionSpec::parse("qk-v+:m=10", tiny_encoder(), DType::kBf16).to_string(), "qk-v+");
}

TEST(AttentionSpecTest, DefaultsFollowDesign) {
  const ModelShape rope = rope_decoder(32, 128);
  const AttentionSpec mla = AttentionSpec::parse("mla", rope, DType::kBf16);
  EXPECT_EQ(mla.latent_dim, 512);
  EXPECT_EQ(mla.rope_dim, 64);
  EXPECT_EQ(mla.nope_dim, 128);
  EXPECT_EQ(mla.value_dim, 128);
  EXPECT_EQ(mla.q_latent_dim, 0);
  EXPECT_EQ(mla.pos, PosScheme::kDrope);
  EXPECT_EQ(mla.qk_dim(), 192);

  const AttentionSpec gva = AttentionSpec::parse("gva:8", rope, DType::kBf16);
  EXPECT_EQ(gva.n_groups, 8);
  EXPECT_EQ(gva.rope_dim, 16);
  EXPECT_EQ(gva.nope_dim, 128);
  EXPECT_EQ(gva.pos, PosScheme::kDrope);
  EXPECT_EQ(gva.m_init, GvaInit::kBaseline);
  EXPECT_EQ(gva.qk_dim(), 144);  // scores scale by 1/sqrt(d_n + d_r)

  const AttentionSpec gva0 = AttentionSpec::parse("gva:8,dr=0", rope, DType::kBf16);
  EXPECT_EQ(gva0.pos, PosScheme::kRope);

  EXPECT_EQ(AttentionSpec::parse("mha", rope, DType::kBf16).n_groups, 32);
  EXPECT_EQ(AttentionSpec::parse("mqa", rope, DType::kBf16).n_groups, 1);
  EXPECT_EQ(AttentionSpec::parse("q-mqa", rope, DType::kBf16).n_groups, 1);
  EXPECT_EQ(AttentionSpec::parse("mha", rope, DType::kBf16).pos, PosScheme::kRope);
  EXPECT_EQ(AttentionSpec::parse("mha", tiny_gpt(), DType::kBf16).pos, PosScheme::kLearned);
  EXPECT_EQ(AttentionSpec::parse("qk-v+", tiny_encoder(), DType::kBf16).pos, PosScheme::kBias2d);
}

struct BadSpec {
  std::string text;
  ModelShape model;
  std::string field;
  std::string message_part;
};

TEST(AttentionSpecTest, RejectsImpossibleSpecsNamingTheField) {
  ModelShape odd_head = rope_decoder(4, 65);
  ModelShape learned = tiny_gpt();
  const std::vector<BadSpec> cases = {
      {"gqa:5", rope_decoder(), "groups", "16 query heads cannot be split into 5 groups"},
      {"gqa:0", rope_decoder(), "groups", "into 0 groups"},
      {"gqa:32", rope_decoder(), "groups", "into 32 groups"},
      {"q-gqa:3", rope_decoder(), "groups", "cannot be split into 3 groups"},
      {"gva:6,dr=16", rope_decoder(), "groups", "cannot be split into 6 groups"},
      {"gqa", rope_decoder(), "groups", "needs a group count"},
      {"gva", rope_decoder(), "groups", "needs a group count"},
      {"gqa:x", rope_decoder(), "groups", "'x' is not a non-negative integer"},
      {"gqa:-2", rope_decoder(), "groups", "not a non-negative integer"},
      {"gqq:8", rope_decoder(), "attn", "unknown attention variant 'gqq'"},
      {"", rope_decoder(), "attn", "unknown attention variant ''"},
      {"mha", odd_head, "head_dim", "rotated width must be even, got 65"},
      {"gva:4,dr=15", rope_decoder(), "dr", "dr must be even, got 15"},
      {"mla:dr=7", rope_decoder(), "dr", "dr must be even"},
      {"mla:dr=0", rope_decoder(), "dr", "dr must be > 0"},
      {"mla:dc=0", rope_decoder(), "dc", "latent width must be > 0"},
      {"mla:dn=0", rope_decoder(), "dn", "must be > 0"},
      {"gva:4,dn=0", rope_decoder(), "dn", "must be > 0"},
      {"gva:4,dr=0,dn=63", rope_decoder(), "dn", "rotated width must be even, got 63"},
      {"qk-v+", rope_decoder(), "attn", "non-causal models only"},
      {"qkv1+", learned, "attn", "a decoder is causal"},
      {"qk-v+:m=0", tiny_encoder(), "m", "positive and even"},
      {"qkv1+:m=5", tiny_encoder(), "m", "got 5"},
      {"linear", rope_decoder(), "pos", "linear attention takes learned or no positions"},
      {"q-kv:knorm", learned, "knorm", "positions are learned"},
      {"gqa:4,qnorm", rope_decoder(), "qnorm", "does not apply to gqa"},
      {"gva:4,dr=16,plainlatent", rope_decoder(), "plainlatent", "does not apply to gva"},
      {"mla:plainlatent=1", rope_decoder(), "plainlatent", "is a flag and takes no value"},
      {"mha,init=scale-matched", rope_decoder(), "init", "does not apply to mha"},
      {"gva:4,init=orthogonal", rope_decoder(), "init", "unknown M_h init 'orthogonal'"},
      {"gva:4,dr=16,dr=24", rope_decoder(), "dr", "given twice"},
      {"gva:4,qnorm=1", rope_decoder(), "qnorm", "is a flag"},
      {"gva:4,dr", rope_decoder(), "dr", "needs a value"},
      {"gqa:4,", rope_decoder(), "attn", "empty option"},
      {"gta:4,dr=0", rope_decoder(), "dr", "between 1 and d_h - 1"},
      {"gta:4,dr=64", rope_decoder(), "dr", "got 64"},
      {"gta:4,dr=7", rope_decoder(), "dr", "dr must be even, got 7"},
      {"gta:4,dn=32", rope_decoder(), "dn", "does not apply to gta"},
      {"gta", rope_decoder(), "groups", "gta needs a group count"},
      {"gla", rope_decoder(), "hc", "gla needs its number of latent heads"},
      {"gla:dc=64", rope_decoder(), "hc", "gla:hc=C"},
      {"gla:hc=3", rope_decoder(), "hc", "cannot be split into 3"},
      {"gla:hc=0", rope_decoder(), "hc", "cannot be split into 0"},
      {"gla:hc=2,dr=0", rope_decoder(), "dr", "dr must be > 0"},
      {"gla:hc=2,dc=0", rope_decoder(), "dc", "latent width must be > 0"},
      {"gla:4", rope_decoder(), "4", "does not apply to gla"},
      {"mla:dc=99999999999999999999", rope_decoder(), "dc", "not a non-negative integer"},
  };
  for (const BadSpec& c : cases) {
    SCOPED_TRACE(c.text);
    try {
      AttentionSpec::parse(c.text, c.model, DType::kBf16);
      ADD_FAILURE() << "accepted";
    } catch (const SpecError& e) {
      EXPECT_EQ(e.field(), c.field) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.message_part), std::string::npos) << e.what();
    }
  }
}

TEST(AttentionSpecTest, ValidateCatchesHandBuiltSpecs) {
  AttentionSpec spec = AttentionSpec::parse("gqa:4", rope_decoder(), DType::kBf16);
  spec.n_groups = 3;
  EXPECT_THROW(spec.validate(), SpecError);
  spec = AttentionSpec::parse("mha", rope_decoder(), DType::kBf16);
  spec.n_groups = 8;  // mha has one group per head
  EXPECT_THROW(spec.validate(), SpecError);
  spec = AttentionSpec::parse("mha", rope_decoder(), DType::kBf16);
  spec.q_norm = true;
  EXPECT_THROW(spec.validate(), SpecError);
}

// Keys ordered by element pairs: two-stream bf16 caches only; the layout carries the order.
TEST(AttentionSpecTest, KeyOrderPairsAppliesToTwoStreamBf16CachesOnly) {
  AttentionSpec spec = AttentionSpec::parse("gqa:4", rope_decoder(), DType::kBf16);
  spec.key_cache_order = KeyOrder::kTokenPairs;
  EXPECT_NO_THROW(spec.validate());
  EXPECT_EQ(spec.cache_layout().key_order, KeyOrder::kTokenPairs);
  EXPECT_EQ(AttentionSpec::parse("gqa:4", rope_decoder(), DType::kBf16).cache_layout().key_order,
            KeyOrder::kRows);
  const std::pair<const char*, DType> refused[] = {{"gva:4", DType::kBf16},
                                                   {"mla", DType::kBf16},
                                                   {"q-kv", DType::kBf16},
                                                   {"gqa:4", DType::kF32},
                                                   {"gqa:4", DType::kQ8_0}};
  for (const auto& [text, dtype] : refused) {
    SCOPED_TRACE(text);
    AttentionSpec bad = AttentionSpec::parse(text, rope_decoder(), dtype);
    bad.key_cache_order = KeyOrder::kTokenPairs;
    try {
      bad.validate();
      ADD_FAILURE() << "accepted";
    } catch (const SpecError& e) {
      EXPECT_EQ(e.field(), "key_order") << e.what();
    }
  }
}

TEST(AttentionSpecTest, SharingPropertiesMatchTheFamilyTable) {
  const ModelShape rope = rope_decoder();
  for (const char* text : {"q-kv", "qkv1", "q-gqa:4", "q-mqa"}) {
    EXPECT_TRUE(AttentionSpec::parse(text, rope, DType::kBf16).shares_kv()) << text;
  }
  EXPECT_TRUE(AttentionSpec::parse("linear", tiny_gpt(), DType::kBf16).shares_kv());
  for (const char* text : {"mha", "gqa:4", "mqa", "qk-v", "mla", "gva:4"}) {
    EXPECT_FALSE(AttentionSpec::parse(text, rope, DType::kBf16).shares_kv()) << text;
  }
}

}  // namespace
}  // namespace kvlab
