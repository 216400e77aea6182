#include "experiments/decode_bench_row.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "cache/decode_params.h"
#include "kernels/convert.h"
#include "kernels/decode_attention.h"
#include "spec/spec_error.h"

namespace kvlab {

static_assert(kBenchPageTokens % kDecodeBlockTokens == 0,
              "keys in pairs need pages of whole blocks");

int64_t step_bytes(const CacheLayout& layout, int64_t context, int64_t batch) {
  if (layout.kernel == DecodeKernel::kRecurrentState) {
    return batch * layout.state_scalars * static_cast<int64_t>(sizeof(float));
  }
  return context * batch * layout.bytes_per_token();
}

DecodeRow make_row(const AttentionSpec& spec, AttnPrecision precision, int64_t context,
                   int64_t batch, int64_t layers, std::mt19937& rng,
                   const FastDecoder& simd_check) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const CacheLayout layout = spec.cache_layout();
  DecodeRow row;
  row.attn = spec.to_string();
  row.dtype = spec.cache_dtype;
  row.key_order = layout.key_order;
  row.macs =
      static_cast<double>(batch) * static_cast<double>(spec.decode_macs(context).mixing.value());
  row.context = context;
  row.layers = layers;
  row.bytes = step_bytes(layout, context, batch);
  row.state = std::make_unique<RowState>();
  RowState* s = row.state.get();
  if (layout.kernel == DecodeKernel::kRecurrentState) {
    // linear attention: one f32 state per head, read and rewritten each step, the same size
    // at every context (the context column only repeats)
    const int64_t per_layer = batch * layout.state_scalars;
    const int64_t d = spec.head_dim, heads = spec.n_heads;
    s->states = HugePageFloats(layers * per_layer);
    for (int64_t i = 0; i < layers * batch * heads; ++i) {
      float* state = s->states.data() + i * (d * d + d);
      for (int64_t j = 0; j < d * d; ++j) state[j] = 0.01f * uniform(rng);
      for (int64_t j = 0; j < d; ++j) state[d * d + j] = 1.0f;  // positive normalisers
    }
    s->z.resize(static_cast<size_t>(batch * heads * d));
    s->result.resize(s->z.size());
    for (float& x : s->z) x = uniform(rng);
    row.step = [s, layers, per_layer, batch, heads, d](FastDecoder& decoder, int r) {
      decoder.run(LinearStepParams{s->z.data(), s->states.data() + (r % layers) * per_layer,
                                   s->result.data(), batch, heads, d});
    };
    return row;
  }
  const int64_t pages_per_seq = (context + kBenchPageTokens - 1) / kBenchPageTokens;
  s->cache = std::make_unique<PagedKvCache>(layout, layers, kBenchPageTokens, pages_per_seq * batch,
                                            batch);
  PagedKvCache& cache = *s->cache;
  const bool rebuild = layout.kernel == DecodeKernel::kReconstructKeys;  // gva dr=0
  {  // before the cache is filled: a row the scalar reference would compute is refused
    DecodeParams probe = decode_params_for(spec, cache, 0, PageTable{});
    probe.precision = precision;
    const float marker = 0.0f;  // effective_precision asks only whether keys are rebuilt
    probe.key_maps = rebuild ? &marker : nullptr;
    row.precision = effective_precision(probe);
    if (!simd_check.runs_simd(probe)) {
      throw SpecError("dtype", fmt::format("{} on a {} cache in {} arithmetic runs the scalar "
                                           "reference; bench decode times the SIMD kernels",
                                           row.attn, dtype_name(spec.cache_dtype),
                                           attn_precision_name(row.precision)));
    }
  }
  std::vector<int32_t> seqs;
  for (int64_t b = 0; b < batch; ++b) {
    seqs.push_back(cache.add_sequence());
    cache.append(seqs.back(), context);
  }
  // Fill every pool with small pseudo-random values (an LCG: 1 GiB in well under a second).
  uint32_t lcg = 12345;
  for (int64_t l = 0; l < layers; ++l) {
    for (size_t k = 0; k < layout.streams.size(); ++k) {
      const CacheStream& st = layout.streams[k];
      const int64_t rows = pages_per_seq * batch * kBenchPageTokens * st.n_heads;
      auto* pool = const_cast<std::byte*>(cache.pool(l, static_cast<int64_t>(k)));
      std::vector<float> values(static_cast<size_t>(st.head_width));
      for (int64_t r = 0; r < rows; ++r) {
        for (float& v : values) {
          lcg = lcg * 1664525u + 1013904223u;
          v = static_cast<float>(static_cast<int32_t>(lcg >> 8) % 2001 - 1000) / 1000.0f;
        }
        store_rows(values.data(), 1, st.head_width, layout.stream_dtype(st),
                   pool + r * layout.head_row_bytes(st));
      }
    }
  }
  s->table = cache.page_table(seqs);
  const DecodeParams shape_params = decode_params_for(spec, cache, 0, s->table);
  const int64_t key_width = shape_params.key_width;
  const int64_t rope_width = shape_params.rope_width;
  s->q.resize(static_cast<size_t>(batch * spec.n_heads * key_width));
  s->qr.resize(static_cast<size_t>(batch * spec.n_heads * rope_width));
  s->result.resize(static_cast<size_t>(batch * spec.n_heads * shape_params.value_width));
  for (float& x : s->q) x = uniform(rng);
  for (float& x : s->qr) x = uniform(rng);
  s->norm_weight.assign(static_cast<size_t>(key_width), 1.0f);
  s->key_maps.resize(static_cast<size_t>(rebuild ? spec.n_heads * spec.head_dim * key_width : 0));
  for (float& x : s->key_maps) x = uniform(rng) / std::sqrt(static_cast<float>(spec.head_dim));
  const bool norm_on_read = layout.norm_on_read;
  const double per_token = static_cast<double>(key_width + rope_width + shape_params.value_width);
  row.content_score_fraction = rebuild ? 0.0 : static_cast<double>(key_width) / per_token;
  row.step = [s, spec, layers, rope_width, rebuild, norm_on_read, precision](FastDecoder& decoder,
                                                                             int r) {
    DecodeParams p = decode_params_for(spec, *s->cache, r % layers, s->table);
    p.q = s->q.data();
    p.q_rope = rope_width > 0 ? s->qr.data() : nullptr;
    p.norm_weight = norm_on_read ? s->norm_weight.data() : nullptr;
    p.key_maps = rebuild ? s->key_maps.data() : nullptr;
    p.out = s->result.data();
    p.precision = precision;
    decoder.run(p);
  };
  return row;
}

namespace {

// Rewrites `table` to cover `tokens` per sequence with page ids that cycle over each sequence's
// own (full) pages: a long context whose rows are a few pages read again and again.
void cycle_pages(PageTable& table, int64_t tokens) {
  const int64_t page = table.page_size, pages = (tokens + page - 1) / page;
  PageTable cycled;
  cycled.page_size = table.page_size;
  cycled.indptr = {0};
  for (int64_t b = 0; b < table.n_seqs(); ++b) {
    const int64_t first = table.indptr[static_cast<size_t>(b)];
    const int64_t own = table.indptr[static_cast<size_t>(b) + 1] - first;
    for (int64_t i = 0; i < pages; ++i) {
      cycled.page_ids.push_back(table.page_ids[static_cast<size_t>(first + i % own)]);
    }
    cycled.indptr.push_back(static_cast<int32_t>(cycled.page_ids.size()));
    cycled.last_page_len.push_back(static_cast<int32_t>(tokens - (pages - 1) * page));
  }
  table = std::move(cycled);
}

}  // namespace

ComputeProbe::ComputeProbe(const AttentionSpec& spec, AttnPrecision precision, int64_t batch,
                           int threads, std::mt19937& rng, const FastDecoder& simd_check) {
  constexpr int64_t kHotBytes = 256 << 10;
  const int64_t page_bytes = kBenchPageTokens * spec.cache_layout().bytes_per_token();
  const int64_t short_tokens = kDecodeChunkTokens * threads;
  const int64_t own_pages = std::clamp<int64_t>(kHotBytes / std::max<int64_t>(1, page_bytes), 1,
                                                short_tokens / kBenchPageTokens);
  for (int k = 0; k < 2; ++k) {
    rows_[k] = make_row(spec, precision, own_pages * kBenchPageTokens, batch, 1, rng, simd_check);
    tokens_[k] = short_tokens * (k + 1);
    cycle_pages(rows_[k].state->table, tokens_[k]);
  }
}

void ComputeProbe::time(FastDecoder& decoder, std::vector<double>& samples_ns, int64_t batch,
                        int pairs) {
  rows_[0].step(decoder, 0);
  rows_[1].step(decoder, 0);
  for (int i = 0; i < pairs; ++i) {
    double us[2];
    for (int k = 0; k < 2; ++k) {
      const auto start = std::chrono::steady_clock::now();
      rows_[k].step(decoder, 0);
      us[k] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                  .count();
    }
    samples_ns.push_back((us[1] - us[0]) * 1e3 /
                         static_cast<double>((tokens_[1] - tokens_[0]) * batch));
  }
}
}  // namespace kvlab
