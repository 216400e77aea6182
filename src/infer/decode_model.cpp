#include "infer/decode_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "cache/decode_params.h"
#include "kernels/convert.h"
#include "kernels/gelu.h"

namespace kvlab::infer {
namespace {

using Clock = std::chrono::steady_clock;

double micros_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

int64_t max_of(std::initializer_list<int64_t> values) { return std::max(values); }

}  // namespace

DecodeModel::DecodeModel(DecodeWeights weights, PagedKvCache& cache, int threads, int64_t max_batch,
                         int64_t max_tokens)
    : w_(std::move(weights)),
      cache_(cache),
      decoder_(threads),
      step_(cache, decoder_, w_.shape.d_model),
      max_batch_(max_batch),
      prefill_rows_(cache.layout().kernel == DecodeKernel::kRecurrentState ? 1 : kPrefillRows) {
  const ModelShape& shape = w_.shape;
  if (max_batch <= 0) throw std::invalid_argument("decode model: max_batch must be > 0");
  if (w_.layers.empty()) throw std::invalid_argument("decode model: no layers");
  const CacheLayout& layout = cache_.layout();
  const int64_t D = shape.d_model, B = std::max(max_batch, prefill_rows_);
  prefill_seqs_.resize(static_cast<size_t>(prefill_rows_));
  row_indices_.resize(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) row_indices_[static_cast<size_t>(b)] = b;
  ScratchWidths widest;
  int64_t mlp_width = 0, experts = 0, chosen = 0, groups = 0;
  for (const BlockWeights& b : w_.layers) {
    const AttentionSpec& s = b.attention->spec();
    if (!(s.cache_layout().streams == layout.streams) || s.cache_layout().kernel != layout.kernel) {
      throw std::invalid_argument("decode model: the cache is not laid out for " + s.to_string());
    }
    const ScratchWidths w = b.attention->scratch_widths();
    for (auto [to, from] : {std::pair{&widest.proj_a, w.proj_a},
                            {&widest.proj_b, w.proj_b},
                            {&widest.proj_c, w.proj_c},
                            {&widest.query, w.query},
                            {&widest.query_rope, w.query_rope},
                            {&widest.attended, w.attended},
                            {&widest.expanded, w.expanded},
                            {&widest.rope, w.rope}}) {
      *to = std::max(*to, from);
    }
    const FeedForwardWeights& f = b.mlp;
    mlp_width = max_of({mlp_width, f.dense.up.out});
    for (const MlpWeights& e : f.experts) mlp_width = max_of({mlp_width, e.up.out});
    for (const MlpWeights& e : f.shared_experts) mlp_width = max_of({mlp_width, e.up.out});
    experts = max_of({experts, f.router.out});
    chosen = max_of({chosen, f.routing.experts_per_token});
    groups = max_of({groups, f.routing.n_expert_groups});
  }
  step_.reserve(widest, B, max_tokens);
  hidden_.resize(static_cast<size_t>(B * D));
  normed_.resize(hidden_.size());
  block_out_.resize(hidden_.size());
  mlp_a_.resize(static_cast<size_t>(B * mlp_width));
  mlp_b_.resize(mlp_a_.size());
  mlp_out_.resize(hidden_.size());
  expert_out_.resize(static_cast<size_t>(D));
  router_.resize(static_cast<size_t>(B * experts));
  chosen_experts_.resize(static_cast<size_t>(chosen));
  expert_weights_.resize(static_cast<size_t>(chosen));
  route_choice_.resize(static_cast<size_t>(experts));
  group_scores_.resize(static_cast<size_t>(groups));
  chosen_groups_.resize(static_cast<size_t>(groups));
  // keys rotated on read (shared K=V + RoPE; gva dr=0 rebuilds and rotates them over d_n)
  const AttentionSpec& spec = w_.layers[0].attention->spec();
  if (layout.rope_on_read || layout.kernel == DecodeKernel::kReconstructKeys) {
    const PageTable no_sequences;
    const DecodeParams widths = decode_params_for(spec, cache_, 0, no_sequences);
    decoder_.prepare_rope(max_tokens + cache_.page_size(), widths.key_width, spec.rope_theta,
                          spec.rope_scaling);
  }
}

void DecodeModel::mlp(const MlpWeights& m, const float* x, float* y, int64_t n) {
  const int64_t width = m.up.out, D = w_.shape.d_model;
  // up [n, width] (and gate, from the same read of x)
  const AttentionStep::DenseOutput outputs[] = {{&m.up, mlp_a_.data(), width},
                                                {&m.gate, mlp_b_.data(), width}};
  step_.dense(std::span(outputs, m.kind == MlpKind::kSwiglu ? 2 : 1), x, D, n);
  step_.for_rows(n, width, [&](int64_t first, int64_t last) {
    float* a = mlp_a_.data() + first * width;
    const int64_t elements = (last - first) * width;
    if (m.kind == MlpKind::kSwiglu) {
      swiglu_forward(mlp_b_.data() + first * width, a, elements);
    } else {  // torch's exact x Φ(x), or GPT-2's tanh form
      gelu_forward(m.kind == MlpKind::kGeluTanh ? GeluForm::kTanh : GeluForm::kErf, a, a, elements);
    }
  });
  step_.dense(m.down, mlp_a_.data(), width, y, D, n);  // [n, D]
}

void DecodeModel::route(const FeedForwardWeights& f, float* scores) {
  const MoeShape& r = f.routing;
  const int64_t E = f.router.out, k = r.experts_per_token;
  if (r.scoring == MoeScoring::kSoftmax) {
    const float top = *std::max_element(scores, scores + E);
    double total = 0;
    for (int64_t e = 0; e < E; ++e) total += (scores[e] = std::exp(scores[e] - top));
    for (int64_t e = 0; e < E; ++e) scores[e] = static_cast<float>(scores[e] / total);
  } else {
    for (int64_t e = 0; e < E; ++e) scores[e] = 1.0f / (1.0f + std::exp(-scores[e]));
  }
  float* choice = route_choice_.data();  // what is ranked: the score (+ the correction bias)
  for (int64_t e = 0; e < E; ++e) {
    choice[e] = scores[e] + (f.score_correction.empty() ? 0.0f : f.score_correction[e]);
  }
  // top-k of values[0, n) into out (the first index wins a tie, as torch's topk on CPU)
  const auto top_k = [](const float* values, int64_t n, int64_t count, int64_t* out) {
    for (int64_t c = 0; c < count; ++c) {
      int64_t best = -1;
      for (int64_t e = 0; e < n; ++e) {
        if (std::find(out, out + c, e) == out + c && (best < 0 || values[e] > values[best])) {
          best = e;
        }
      }
      out[c] = best;
    }
  };
  if (r.n_expert_groups > 1) {
    const int64_t G = r.n_expert_groups, size = E / G;
    for (int64_t g = 0; g < G; ++g) {
      const float* group = choice + g * size;
      int64_t best[2] = {0, 0};
      const int64_t ranked = r.group_score == MoeGroupScore::kMax ? 1 : 2;
      top_k(group, size, ranked, best);
      group_scores_[static_cast<size_t>(g)] =
          group[best[0]] + (ranked == 2 ? group[best[1]] : 0.0f);
    }
    top_k(group_scores_.data(), G, r.groups_per_token, chosen_groups_.data());
    for (int64_t g = 0; g < G; ++g) {
      if (std::find(chosen_groups_.begin(), chosen_groups_.begin() + r.groups_per_token, g) ==
          chosen_groups_.begin() + r.groups_per_token) {
        std::fill(choice + g * size, choice + (g + 1) * size,
                  -std::numeric_limits<float>::infinity());
      }
    }
  }
  top_k(choice, E, k, chosen_experts_.data());
  double total = 0;
  for (int64_t c = 0; c < k; ++c) total += scores[chosen_experts_[static_cast<size_t>(c)]];
  for (int64_t c = 0; c < k; ++c) {
    double w = scores[chosen_experts_[static_cast<size_t>(c)]];
    if (r.normalize_top_k) w /= total + 1e-20;
    expert_weights_[static_cast<size_t>(c)] = static_cast<float>(w * r.routed_scale);
  }
}

void DecodeModel::feed_forward(const FeedForwardWeights& f, const float* x, float* y, int64_t n) {
  const int64_t D = w_.shape.d_model;
  if (!f.is_moe()) {
    mlp(f.dense, x, y, n);
    return;
  }
  const int64_t E = f.router.out, k = f.routing.experts_per_token;
  step_.dense(f.router, x, D, router_.data(), E, n);  // [n, E]
  std::fill(y, y + n * D, 0.0f);
  for (int64_t b = 0; b < n; ++b) {
    route(f, router_.data() + b * E);
    for (int64_t c = 0; c < k; ++c) {
      const int64_t e = chosen_experts_[static_cast<size_t>(c)];
      const float weight = expert_weights_[static_cast<size_t>(c)];
      mlp(f.experts[static_cast<size_t>(e)], x + b * D, expert_out_.data(), 1);
      for (int64_t i = 0; i < D; ++i) y[b * D + i] += weight * expert_out_[static_cast<size_t>(i)];
    }
  }
  for (const MlpWeights& shared : f.shared_experts) {
    for (int64_t b = 0; b < n; ++b) {
      mlp(shared, x + b * D, expert_out_.data(), 1);
      for (int64_t i = 0; i < D; ++i) y[b * D + i] += expert_out_[static_cast<size_t>(i)];
    }
  }
}

int64_t DecodeModel::learned_position_count() const {
  return static_cast<int64_t>(w_.embed_positions.size()) / std::max<int64_t>(1, w_.shape.d_model);
}

void DecodeModel::require_tokens(const char* caller, const int64_t* tokens, int64_t n) const {
  for (int64_t b = 0; b < n; ++b) {
    if (tokens[b] < 0 || tokens[b] >= w_.shape.vocab_size) {
      throw std::invalid_argument(std::string(caller) + ": token " + std::to_string(tokens[b]) +
                                  " is outside the vocabulary of " +
                                  std::to_string(w_.shape.vocab_size));
    }
  }
}

void DecodeModel::step(const int32_t* seqs, const int64_t* tokens, int64_t n, float* logits) {
  if (n <= 0 || n > max_batch_) {
    throw std::invalid_argument("decode step: batch of " + std::to_string(n) + " sequences (1.." +
                                std::to_string(max_batch_) + " allowed)");
  }
  require_tokens("decode step", tokens, n);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t other = 0; other < b; ++other) {
      if (seqs[other] == seqs[b]) {
        throw std::invalid_argument("decode step: sequence " + std::to_string(seqs[b]) +
                                    " appears twice in one batch");
      }
    }
  }
  run_rows(seqs, tokens, n, row_indices_.data(), n, logits);
}

void DecodeModel::prefill(int32_t seq, const int64_t* tokens, int64_t count, float* logits) {
  if (count <= 0) throw std::invalid_argument("prefill: no tokens");
  require_tokens("prefill", tokens, count);  // before any work
  const int64_t held = cache_.length(seq);
  const int64_t learned_positions = learned_position_count();
  if (!w_.embed_positions.empty() && held + count > learned_positions) {  // before any work
    throw std::invalid_argument("prefill: positions " + std::to_string(held) + ".." +
                                std::to_string(held + count - 1) + " exceed the learned table of " +
                                std::to_string(learned_positions));
  }
  std::fill(prefill_seqs_.begin(), prefill_seqs_.end(), seq);
  try {
    for (int64_t first = 0; first < count; first += prefill_rows_) {
      const int64_t rows = std::min(prefill_rows_, count - first);
      const int64_t last_row = rows - 1;
      run_rows(prefill_seqs_.data(), tokens + first, rows, &last_row, first + rows == count ? 1 : 0,
               logits);
    }
  } catch (...) {  // the sequence keeps what it held before the prompt
    cache_.truncate(seq, held);
    throw;
  }
}

void DecodeModel::step_rows(const int32_t* seqs, const int64_t* tokens, int64_t n,
                            const int64_t* logit_rows, int64_t n_logits, float* logits) {
  if (n <= 0) throw std::invalid_argument("step rows: no rows");
  require_tokens("step rows", tokens, n);
  for (int64_t k = 0; k < n_logits; ++k) {
    const int64_t row = logit_rows[k];
    if (row < 0 || row >= n || (k > 0 && row <= logit_rows[k - 1])) {
      throw std::invalid_argument("step rows: logit row " + std::to_string(row) +
                                  " is not a row of the " + std::to_string(n) +
                                  " after the one before it");
    }
  }
  // every sequence's length before the call, to go back to on a failure in any slice
  std::vector<std::pair<int32_t, int64_t>> held;
  for (int64_t b = 0; b < n; ++b) {
    const auto seen = [&](const std::pair<int32_t, int64_t>& h) { return h.first == seqs[b]; };
    if (std::none_of(held.begin(), held.end(), seen))
      held.push_back({seqs[b], cache_.length(seqs[b])});
  }
  const int64_t capacity = std::max(max_batch_, prefill_rows_);
  const bool recurrent = prefill_rows_ == 1;  // a state advances a token a step
  std::vector<int64_t> slice_logits;
  try {
    int64_t k = 0;  // the next logit row
    for (int64_t first = 0; first < n;) {
      int64_t last = first + 1;
      while (last < n && last - first < capacity &&
             !(recurrent && std::find(seqs + first, seqs + last, seqs[last]) != seqs + last)) {
        ++last;
      }
      slice_logits.clear();
      for (; k < n_logits && logit_rows[k] < last; ++k)
        slice_logits.push_back(logit_rows[k] - first);
      run_rows(seqs + first, tokens + first, last - first, slice_logits.data(),
               static_cast<int64_t>(slice_logits.size()),
               logits + (k - static_cast<int64_t>(slice_logits.size())) * vocab_size());
      first = last;
    }
  } catch (...) {
    for (const auto& [seq, length] : held) cache_.truncate(seq, length);
    throw;
  }
}

void DecodeModel::run_rows(const int32_t* seqs, const int64_t* tokens, int64_t n,
                           const int64_t* logit_rows, int64_t n_logits, float* logits) {
  const auto step_start = step_.profile_ != nullptr ? Clock::now() : Clock::time_point();
  const ModelShape& shape = w_.shape;
  const int64_t D = shape.d_model, V = shape.vocab_size;
  const int64_t learned_positions = learned_position_count();
  step_.seqs_.assign(seqs, seqs + n);
  int64_t appended = 0;
  // every row's sequence as it was, the later rows of a sequence first
  const auto restore = [&] {
    for (int64_t b = appended - 1; b >= 0; --b) {
      cache_.truncate(seqs[b], step_.positions_[static_cast<size_t>(b)]);
    }
  };
  try {
    for (; appended < n; ++appended) {
      step_.positions_[static_cast<size_t>(appended)] = cache_.append(seqs[appended], 1);
      const int64_t pos = step_.positions_[static_cast<size_t>(appended)];
      if (!w_.embed_positions.empty() && pos >= learned_positions) {
        ++appended;
        throw std::invalid_argument("decode step: position " + std::to_string(pos) +
                                    " exceeds the learned table of " +
                                    std::to_string(learned_positions));
      }
      step_.row_tokens_[static_cast<size_t>(appended)] = pos + 1;
    }
    cache_.page_table_into(seqs, step_.row_tokens_.data(), n, step_.table_);
  } catch (...) {
    restore();
    throw;
  }
  try {
    for (int64_t b = 0; b < n; ++b) {  // embedding (+ learned or fixed positions)
      float* h = hidden_.data() + b * D;
      const float* e = w_.embed_tokens.data() + tokens[b] * D;
      std::copy(e, e + D, h);
      const int64_t pos = step_.positions_[static_cast<size_t>(b)];
      if (!w_.embed_positions.empty()) {
        const float* pe = w_.embed_positions.data() + pos * D;
        for (int64_t i = 0; i < D; ++i) h[i] += pe[i];
      } else if (shape.pos == PosScheme::kSinusoidal) {
        for (int64_t i = 0; i < D; ++i) {
          const double angle =
              static_cast<double>(pos) *
              std::pow(10000.0, -2.0 * static_cast<double>(i / 2) / static_cast<double>(D));
          h[i] += static_cast<float>(i % 2 == 0 ? std::sin(angle) : std::cos(angle));
        }
      }
    }
    // hidden += `residual` (unless null), then normed = norm(hidden), every row
    const auto next_norm = [&](const float* residual, const NormWeights& norm) {
      step_.for_rows(n, D, [&](int64_t first, int64_t last) {
        for (int64_t b = first; b < last; ++b) {
          add_and_norm(norm, hidden_.data() + b * D,
                       residual == nullptr ? nullptr : residual + b * D, normed_.data() + b * D);
        }
      });
    };
    const float* residual = nullptr;  // the last block's MLP output, added before the next norm
    for (int64_t l = 0; l < static_cast<int64_t>(w_.layers.size()); ++l) {
      const BlockWeights& block = w_.layers[static_cast<size_t>(l)];
      next_norm(residual, block.input_norm);
      block.attention->run(step_, l, normed_.data(), block_out_.data(), n);
      next_norm(block_out_.data(), block.post_attention_norm);
      feed_forward(block.mlp, normed_.data(), mlp_out_.data(), n);
      residual = mlp_out_.data();
    }
    if (n_logits > 0) {  // a prompt's earlier chunks need neither the final norm nor the head
      // logit row k's normed hidden into normed_ row k (k <= its row: nothing unread is written)
      step_.for_rows(n_logits, D, [&](int64_t first, int64_t last) {
        for (int64_t k = first; k < last; ++k) {
          const int64_t b = logit_rows[k];
          add_and_norm(w_.final_norm, hidden_.data() + b * D,
                       residual == nullptr ? nullptr : residual + b * D, normed_.data() + k * D);
        }
      });
      step_.dense(w_.lm_head, normed_.data(), D, logits, V, n_logits);
    }
  } catch (...) {  // a kernel's error: the rows appended are dropped again
    restore();
    throw;
  }
  if (step_.profile_ != nullptr) {
    step_.profile_->step_us += micros_since(step_start);
    ++step_.profile_->steps;
  }
}

}  // namespace kvlab::infer
