#include "cache/paged_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/convert.h"
#include "spec/model_config.h"
#include "spec/test_shapes.h"
#include "thrown_message.h"

namespace kvlab {
namespace {

// Bytes reserved for T tokens equal the spec's cache bytes up to page rounding, every variant.
TEST(PagedKvCacheTest, ReservedBytesMatchTheSpecUpToPageRounding) {
  const ModelShape rope = testing::rope_decoder(8, 16);
  const ModelShape learned = testing::tiny_gpt();
  const std::pair<const char*, ModelShape> variants[] = {
      {"mha", rope},  {"gqa:2", rope},      {"mqa", rope},           {"qk-v", rope},
      {"q-kv", rope}, {"qkv1", rope},       {"q-gqa:4,knorm", rope}, {"q-mqa", rope},
      {"mla", rope},  {"gva:2,dr=8", rope}, {"gva:4,dr=0", rope},    {"linear", learned}};
  for (DType dtype : {DType::kF32, DType::kBf16, DType::kF16}) {
    for (const auto& [attn, shape] : variants) {
      SCOPED_TRACE(attn);
      const ModelConfig m = ModelConfig::make(shape, attn, dtype);
      const int64_t page = 16;
      PagedKvCache cache(m.attn.cache_layout(), shape.n_layers, page, /*max_pages=*/64,
                         /*max_seqs=*/4);
      for (int64_t tokens : {0, 1, 7, 16, 17, 97, 160}) {
        const int32_t seq = cache.add_sequence();
        cache.append(seq, tokens);
        const int64_t spec = m.cache_bytes(tokens, 1).value();
        const int64_t rounded = m.cache_bytes((tokens + page - 1) / page * page, 1).value();
        EXPECT_EQ(cache.bytes_in_use(), rounded) << tokens << " tokens";
        EXPECT_GE(cache.bytes_in_use(), spec);
        if (tokens % page == 0) {
          EXPECT_EQ(cache.bytes_in_use(), spec);
        }
        cache.free_sequence(seq);
        EXPECT_EQ(cache.bytes_in_use(), 0);
      }
    }
  }
}

CacheLayout key_value_layout(int64_t heads, int64_t key_width, int64_t value_width, DType dtype) {
  return {DecodeKernel::kTwoStream,
          {{StreamRole::kKey, heads, key_width}, {StreamRole::kValue, heads, value_width}},
          dtype};
}

// Inside a page each head's rows are consecutive ([page][n_heads][page_size] head rows), so a
// decode unit — a block of tokens × one group — is one contiguous run; written out by hand here.
TEST(PagedKvCacheTest, AHeadsRowsAreConsecutiveWithinAPage) {
  const CacheLayout layout = key_value_layout(3, 4, 2, DType::kBf16);
  PagedKvCache cache(layout, /*n_layers=*/2, /*page_size=*/4, /*max_pages=*/8, /*max_seqs=*/2);
  const int32_t other = cache.add_sequence(), seq = cache.add_sequence();
  cache.append(other, 3);  // seq's pages are not the pool's first
  cache.append(seq, 10);
  const PageTable table = cache.page_table({seq});
  for (int64_t stream : {0, 1}) {
    const int64_t row_bytes = stream == 0 ? 4 * 2 : 2 * 2;  // bf16
    const std::byte* pool = cache.pool(1, stream);
    for (int64_t pos = 0; pos < 10; ++pos) {
      const int64_t page = table.page_ids[static_cast<size_t>(pos / 4)];
      for (int64_t head = 0; head < 3; ++head) {
        const std::byte* expected =
            pool + page * 3 * 4 * row_bytes + head * 4 * row_bytes + (pos % 4) * row_bytes;
        EXPECT_EQ(cache.head_row(1, stream, seq, pos, head), expected)
            << "stream " << stream << " token " << pos << " head " << head;
      }
    }
  }
  // a token's row goes in and comes back whole, head by head
  float row[12], back[12];
  for (int i = 0; i < 12; ++i) row[i] = static_cast<float>(i) - 5.5f;  // exact in bf16
  cache.store_token(0, 0, seq, 9, row);
  cache.load_token(0, 0, seq, 9, back);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(back[i], row[i]);
}

TEST(PagedKvCacheTest, AppendTruncateFreeAndThePageTable) {
  const CacheLayout layout = key_value_layout(2, 4, 4, DType::kF32);
  PagedKvCache cache(layout, /*n_layers=*/2, /*page_size=*/4, /*max_pages=*/6, /*max_seqs=*/3);
  const int32_t a = cache.add_sequence(), b = cache.add_sequence();
  EXPECT_EQ(cache.append(a, 5), 0);  // 2 pages
  EXPECT_EQ(cache.append(b, 4), 0);  // 1 page
  EXPECT_EQ(cache.append(a, 3), 5);  // still 2 pages
  EXPECT_EQ(cache.free_pages(), 3);
  // rows are distinct memory and keep what is written
  for (int64_t pos = 0; pos < 8; ++pos) {
    float row[8];
    for (int i = 0; i < 8; ++i) row[i] = static_cast<float>(100 * pos + i);
    cache.store_token(1, 1, a, pos, row);
  }
  float back[8];
  cache.load_token(1, 1, a, 6, back);
  EXPECT_EQ(back[3], 603.0f);
  EXPECT_EQ(back[7], 607.0f);
  const PageTable t = cache.page_table({a, b});
  EXPECT_EQ(t.indptr, (std::vector<int32_t>{0, 2, 3}));
  EXPECT_EQ(t.last_page_len, (std::vector<int32_t>{4, 4}));
  EXPECT_EQ(t.tokens(0), 8);
  EXPECT_EQ(t.tokens(1), 4);
  // a prompt's rows: each row shows its sequence up to its own token, whatever the others hold
  const int32_t seqs[] = {a, a, a, b};
  const int64_t tokens[] = {1, 4, 5, 2};
  PageTable rows;
  cache.page_table_into(seqs, tokens, 4, rows);
  EXPECT_EQ(rows.indptr, (std::vector<int32_t>{0, 1, 2, 4, 5}));
  EXPECT_EQ(rows.page_ids[2], t.page_ids[0]);
  EXPECT_EQ(rows.page_ids[3], t.page_ids[1]);
  EXPECT_EQ(rows.page_ids[4], t.page_ids[2]);
  EXPECT_EQ(rows.last_page_len, (std::vector<int32_t>{1, 4, 1, 2}));
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(rows.tokens(r), tokens[r]) << r;
  const int64_t past_the_end[] = {9}, none[] = {0};
  EXPECT_NE(thrown_message([&] {
              cache.page_table_into(seqs, past_the_end, 1, rows);
            }).find("page table row 0: 9 tokens of sequence 0, which holds 8"),
            std::string::npos);
  EXPECT_THROW(cache.page_table_into(seqs, none, 1, rows), CacheError);
  cache.truncate(a, 3);  // back to one page
  EXPECT_EQ(cache.free_pages(), 4);
  EXPECT_EQ(cache.page_table({a}).last_page_len, (std::vector<int32_t>{3}));
  EXPECT_THROW(cache.append(b, 100), CacheError);           // needs 25 pages, 4 free
  EXPECT_EQ(cache.length(b), 4);                            // unchanged by the refusal
  EXPECT_THROW(cache.head_row(0, 0, a, 3, 0), CacheError);  // not cached
  EXPECT_THROW(cache.head_row(0, 0, a, 0, 2), CacheError);  // 2 heads
  EXPECT_THROW(cache.head_row(0, 2, a, 0, 0), CacheError);  // 2 streams
  EXPECT_THROW(cache.head_row(2, 0, a, 0, 0), CacheError);  // 2 layers
  EXPECT_THROW(cache.truncate(a, 9), CacheError);
  cache.free_sequence(a);
  EXPECT_THROW(cache.length(a), CacheError);
  EXPECT_EQ(cache.add_sequence(), a);  // the slot is reused
  cache.add_sequence();
  EXPECT_THROW(cache.add_sequence(), CacheError);  // 3 slots
}

// KeyOrder::kTokenPairs: inside a page's group block of [page_size][width] bf16 elements, key
// element e of the token at place t sits at 16-bit index (e / 2) · page_size · 2 + t · 2 + e % 2
// (pairs of elements, tokens side by side); values keep rows. Written out by hand here.
TEST(PagedKvCacheTest, KeysOrderedByPairsSitPairMajorInTheirGroupsBlock) {
  CacheLayout layout = key_value_layout(3, 6, 4, DType::kBf16);
  layout.key_order = KeyOrder::kTokenPairs;
  const int64_t page_size = 16;
  PagedKvCache cache(layout, /*n_layers=*/2, page_size, /*max_pages=*/6, /*max_seqs=*/2);
  const int32_t other = cache.add_sequence(), seq = cache.add_sequence();
  cache.append(other, 5);  // seq's pages are not the pool's first
  cache.append(seq, 40);
  const PageTable table = cache.page_table({seq});
  // an odd number below 256 times a power of two: exact in bf16, one value per (token, head, e)
  auto value_of = [](int64_t pos, int64_t head, int64_t e) {
    return std::ldexp(static_cast<float>(2 * pos + 1), static_cast<int>(head * 6 + e) - 8);
  };
  for (int64_t pos = 0; pos < 40; ++pos) {
    float keys[18];
    for (int64_t head = 0; head < 3; ++head) {
      for (int64_t e = 0; e < 6; ++e) keys[head * 6 + e] = value_of(pos, head, e);
    }
    cache.store_token(1, 0, seq, pos, keys);
  }
  const auto* pool = reinterpret_cast<const uint16_t*>(cache.pool(1, 0));
  for (int64_t pos = 0; pos < 40; ++pos) {
    const int64_t page = table.page_ids[static_cast<size_t>(pos / page_size)];
    const int64_t t = pos % page_size;
    for (int64_t head = 0; head < 3; ++head) {
      const uint16_t* block = pool + (page * 3 + head) * page_size * 6;
      for (int64_t e = 0; e < 6; ++e) {
        const uint16_t bits = block[(e / 2) * page_size * 2 + t * 2 + e % 2];
        EXPECT_EQ(bf16_to_f32(bits), value_of(pos, head, e))
            << "token " << pos << " head " << head << " element " << e;
      }
    }
    float back[18];
    cache.load_token(1, 0, seq, pos, back);
    for (int64_t i = 0; i < 18; ++i) EXPECT_EQ(back[i], value_of(pos, i / 6, i % 6));
  }
  // a head's key row is not contiguous: no row pointer into it; the value stream keeps rows
  EXPECT_THROW(cache.head_row(1, 0, seq, 3, 0), CacheError);
  EXPECT_NO_THROW(cache.head_row(1, 1, seq, 3, 0));
  // refused: a cache that is not bf16, pages that are not whole blocks, an odd key width
  CacheLayout f16 = layout;
  f16.dtype = DType::kF16;
  EXPECT_THROW(PagedKvCache(f16, 1, 16, 2, 1), CacheError);
  EXPECT_THROW(PagedKvCache(layout, 1, 24, 2, 1), CacheError);
  CacheLayout odd = key_value_layout(3, 5, 4, DType::kBf16);
  odd.key_order = KeyOrder::kTokenPairs;
  EXPECT_THROW(PagedKvCache(odd, 1, 16, 2, 1), CacheError);
  CacheLayout one_stream{DecodeKernel::kOneStream, {{StreamRole::kContent, 3, 6}}, DType::kBf16};
  one_stream.key_order = KeyOrder::kTokenPairs;
  EXPECT_THROW(PagedKvCache(one_stream, 1, 16, 2, 1), CacheError);
}

TEST(PagedKvCacheTest, PoolsAreAlignedAndStatesZeroed) {
  const CacheLayout layout{DecodeKernel::kOneStream,
                           {{StreamRole::kContent, 3, 5}, {StreamRole::kRope, 1, 2}},
                           DType::kBf16};
  PagedKvCache cache(layout, 3, 16, 5, 2);
  for (int64_t l = 0; l < 3; ++l) {
    for (int64_t s = 0; s < 2; ++s) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(cache.pool(l, s)) % 64, 0u);
    }
  }
  CacheLayout recurrent{DecodeKernel::kRecurrentState, {}, DType::kBf16};
  recurrent.state_scalars = 20;
  PagedKvCache states(recurrent, 2, 16, 0, 2);
  const int32_t seq = states.add_sequence();
  states.state(1, seq)[19] = 7.0f;
  states.free_sequence(seq);
  EXPECT_EQ(states.add_sequence(), seq);
  EXPECT_EQ(states.state(1, seq)[19], 0.0f);  // a new sequence starts from zero state
  EXPECT_EQ(states.bytes_in_use(), 2 * 20 * 4);
}

}  // namespace
}  // namespace kvlab
