// The serving engine's KV budget: the spec's byte count (what `kvlab cache` prints), the cache a
// budget allocates, and the startup lines, for llama-3-8b's shape under gqa, gva and mla.
#include "serve/kv_budget.h"

#include <gtest/gtest.h>

#include "cache/paged_cache.h"
#include "spec/model_config.h"
#include "spec/presets.h"
#include "spec/spec_error.h"

namespace kvlab::serve {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(KvBudgetTest, AgreesWithTheSpecAndTheCacheToTheByte) {
  const ModelShape shape = find_preset("llama-3-8b").shape;
  // bytes per token over 32 layers, written out: gqa:8 keeps k and v of 8 heads × 128 in bf16;
  // gva:8,dr=16 8 value heads × 128 and one 16-wide rope key; mla 512 + 64
  const struct {
    const char* attn;
    int64_t bytes_per_token;
  } cases[] = {{"gqa:8", 32 * 2 * (2 * 8 * 128)},
               {"gva:8,dr=16", 32 * 2 * (8 * 128 + 16)},
               {"mla:dc=512,dr=64", 32 * 2 * (512 + 64)}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.attn);
    const ModelConfig config = ModelConfig::make(shape, c.attn, DType::kBf16);
    const KvBudget b =
        plan_kv_budget(config.attn.cache_layout(), shape.n_layers, 2 * kGiB, 16, 8192);
    EXPECT_EQ(b.bytes_per_token, c.bytes_per_token);
    EXPECT_EQ(b.bytes_per_token, config.cache_bytes_per_token().value());
    EXPECT_EQ(b.page_bytes, 16 * b.bytes_per_token);
    EXPECT_EQ(b.pages, 2 * kGiB / b.page_bytes);
    EXPECT_EQ(b.tokens, b.pages * 16);
    EXPECT_EQ(b.tokens * b.bytes_per_token, config.cache_bytes(b.tokens, 1).value());
    EXPECT_LE(b.pages * b.page_bytes, 2 * kGiB);
    EXPECT_DOUBLE_EQ(b.max_concurrency, static_cast<double>(b.tokens) / 8192.0);
    // the pool a 2-layer slice of it allocates: the pages, up to 64-byte alignment per stream
    const CacheLayout layout = config.attn.cache_layout();
    const PagedKvCache cache(layout, 2, 16, 100, 1);
    const int64_t pools = 2 * static_cast<int64_t>(layout.streams.size());
    EXPECT_GE(cache.bytes_allocated(), 100 * 16 * layout.bytes_per_token() * 2);
    EXPECT_LT(cache.bytes_allocated(), 100 * 16 * layout.bytes_per_token() * 2 + 64 * pools);
  }
  // gqa:8 at 2 GiB: 16,384 tokens, two requests of 8,192
  const KvBudget gqa = plan_kv_budget(
      ModelConfig::make(shape, "gqa:8", DType::kBf16).attn.cache_layout(), 32, 2 * kGiB, 16, 8192);
  EXPECT_EQ(gqa.tokens, 16384);
  const std::vector<std::string> lines = describe_kv_budget(gqa);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "KV cache: 131,072 B per token (32 layers), pages of 16 tokens (2,097,152 B)");
  EXPECT_EQ(lines[1], "KV cache memory 2.00 GiB: 1,024 pages, 16,384 tokens");
  EXPECT_EQ(lines[2], "Maximum concurrency for 8,192 tokens per request: 2.00x");
}

// An engine's pages: the budget's for a paged layout; for linear attention's state (no bytes a
// token), the sequences the states allow, capped, each with 8192 / 16 = 512 empty pages.
TEST(KvBudgetTest, SizesTheEngineForPagesOrStates) {
  const ModelShape shape = find_preset("llama-3-8b").shape;
  const KvBudget gqa = plan_kv_budget(
      ModelConfig::make(shape, "gqa:8", DType::kBf16).attn.cache_layout(), 32, 2 * kGiB, 16, 8192);
  const EngineSizing paged = size_engine(gqa, 256);
  EXPECT_EQ(paged.n_pages, 1024);
  EXPECT_EQ(paged.max_num_seqs, 256);
  ModelShape linear_shape = shape;
  linear_shape.pos = PosScheme::kNone;
  const KvBudget linear =
      plan_kv_budget(ModelConfig::make(linear_shape, "linear", DType::kF32).attn.cache_layout(), 32,
                     2 * kGiB, 16, 8192);
  ASSERT_EQ(linear.bytes_per_token, 0);
  ASSERT_GT(linear.state_bytes_per_sequence, 0);
  const int64_t states = 2 * kGiB / linear.state_bytes_per_sequence;
  for (const int64_t cap : {int64_t{1}, states, states + 5}) {
    const EngineSizing s = size_engine(linear, cap);
    EXPECT_EQ(s.max_num_seqs, std::min(cap, states));
    EXPECT_EQ(s.n_pages, s.max_num_seqs * 512);
  }
}

TEST(KvBudgetTest, ABudgetTooSmallForOneRequestIsRefusedByName) {
  const ModelShape shape = find_preset("llama-3-8b").shape;
  const CacheLayout layout = ModelConfig::make(shape, "gqa:8", DType::kBf16).attn.cache_layout();
  try {
    plan_kv_budget(layout, 32, 512 << 20, 16, 8192);
    ADD_FAILURE() << "accepted";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "kv-cache-memory");
    EXPECT_NE(std::string(e.what()).find("1.00 GiB"), std::string::npos) << e.what();
  }
}

TEST(KvBudgetTest, ParsesSizesAndFractions) {
  EXPECT_EQ(parse_memory_budget("2GiB", "kv-cache-memory"), 2 * kGiB);
  EXPECT_EQ(parse_memory_budget("1.5GB", "kv-cache-memory"), 1500000000);
  EXPECT_EQ(parse_memory_budget("512MiB", "kv-cache-memory"), 512 << 20);
  EXPECT_EQ(parse_memory_budget("4096", "kv-cache-memory"), 4096);
  EXPECT_GT(parse_memory_budget("0.1", "kv-cache-memory"), 0);
  for (const char* bad : {"", "GiB", "-1GiB", "2 parsecs", "nan", "1e30GiB", "0"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(parse_memory_budget(bad, "kv-cache-memory"), SpecError);
  }
}

}  // namespace
}  // namespace kvlab::serve
