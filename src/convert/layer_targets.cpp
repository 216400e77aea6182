#include "convert/layer_targets.h"

#include <numeric>

#include "spec/spec_error.h"

namespace kvlab::convert {
namespace {

using Parameters = std::map<std::string, torch::Tensor>;

// name.weight and, where the target has input biases, name.bias from augmented rows [.., D+1].
void put_projection(Parameters& p, const std::string& name, const torch::Tensor& rows, bool bias) {
  const torch::Tensor flat = rows.reshape({-1, rows.size(-1)});
  p[name + ".weight"] = weight_of(flat);
  if (bias) p[name + ".bias"] = bias_of(flat);
}

void put_output(Parameters& p, const SourceAttention& source, const torch::Tensor& weight) {
  p["o_proj.weight"] = weight;
  if (source.o_bias.defined()) p["o_proj.bias"] = source.o_bias;
}

bool input_bias(const AttentionSpec& target) { return target.bias != BiasKind::kNone; }

torch::Tensor index_of(const std::vector<int64_t>& channels) {
  return torch::tensor(channels, torch::kLong);
}

// The output projection's columns per head: [D, H·d] -> [H, D, d]
torch::Tensor output_columns(const SourceAttention& source) {
  const int64_t H = source.spec.n_heads, d = source.spec.head_dim;
  return source.o_weight.view({source.o_weight.size(0), H, d}).permute({1, 0, 2});
}

// E[q qᵀ] per head [H, d, d]; with RoPE the rotations mix each pair's two channels, so each pair
// keeps only its mean energy on the diagonal.
torch::Tensor query_weight(const SourceAttention& source, const torch::Tensor& moment, bool rope) {
  const torch::Tensor qq = cross_moment(source.q, moment, source.q);
  if (!rope) return qq;
  const int64_t half = source.spec.head_dim / 2;
  const torch::Tensor e = qq.diagonal(0, -2, -1);  // [H, d]
  const torch::Tensor pair = (e.narrow(1, 0, half) + e.narrow(1, half, half)) / 2;
  return torch::diag_embed(torch::cat({pair, pair}, 1));
}

struct RotarySplit {
  std::vector<int64_t> content;  // every channel when there is no rotary part
  std::vector<int64_t> rotary;
};

RotarySplit split_channels(int64_t head_dim, int64_t rope_dim, const RotarySelection& rotary) {
  RotarySplit out;
  if (rope_dim > 0) {
    out.content = rotary.content_channels(head_dim);
    out.rotary = rotary.rotary_channels(head_dim);
  } else {
    out.content.resize(static_cast<size_t>(head_dim));
    std::iota(out.content.begin(), out.content.end(), int64_t{0});
  }
  return out;
}

// The one RoPE key every head shares, and the factor each source group's queries take on each
// rotary channel. Rotations act alike on the same pair of every group, so per pair p the
// groups' keys k_g,p (two channels each) are fitted by one a_g·r_p: the rank-one fit
// minimising Σ_g W_g,p E‖k_g,p − a_g r_p‖², W_g,p the energy of the queries that read them
// (rotations average each pair's two channels into one weight): the top eigenvector ã of
// E[k̃_g·k̃_g'] with k̃_g = √W_g k_g, r_p = Σ_g ã_g k̃_g, a_g = ã_g / √W_g. The queries absorb
// a_g, so q·(a_g r) needs no per-group key. Exact when the groups' rotary keys are equal.
struct SharedRope {
  torch::Tensor key;          // [d_r, D+1]
  torch::Tensor query_scale;  // [G_source, d_r]
};

SharedRope shared_rope(const SourceAttention& source, const torch::Tensor& moment,
                       const RotarySplit& split) {
  const int64_t H = source.spec.n_heads, Gs = source.spec.n_groups;
  const auto dr = static_cast<int64_t>(split.rotary.size());
  const int64_t half = dr / 2, D1 = source.k.size(2);
  const torch::Tensor ri = index_of(split.rotary);
  const torch::Tensor energy = (torch::matmul(source.q, moment) * source.q).sum(-1);  // [H, d]
  const torch::Tensor rotary_energy = energy.index_select(1, ri);                     // [H, dr]
  // W_g,p: [Gs, d_r/2]
  const torch::Tensor weight =
      (rotary_energy.narrow(1, 0, half) + rotary_energy.narrow(1, half, half))
          .view({Gs, H / Gs, half})
          .sum(1);
  const torch::Tensor k_rotary = source.k.index_select(1, ri);  // [Gs, dr, D+1]
  SharedRope out{torch::zeros({dr, D1}, source.k.options()),
                 torch::zeros({Gs, dr}, source.k.options())};
  for (int64_t p = 0; p < half; ++p) {
    // queries that never reach the pair give no preference: equal weights
    torch::Tensor w = weight.select(1, p);
    if (w.sum().item<double>() <= 0) w = torch::ones_like(w);
    const torch::Tensor root = w.sqrt();  // [Gs]
    // the pair's two channels of every group, weighted: [Gs, 2, D+1]
    const torch::Tensor keys =
        torch::stack({k_rotary.select(1, p), k_rotary.select(1, p + half)}, 1) *
        root.view({Gs, 1, 1});
    // E[k̃_g · k̃_g'] summed over the two channels: [Gs, Gs]
    const torch::Tensor gram = torch::einsum("gcd,de,hce->gh", {keys, moment, keys});
    const torch::Tensor top = std::get<1>(torch::linalg_eigh(gram)).select(1, Gs - 1);  // ã
    const torch::Tensor shared = (top.view({Gs, 1, 1}) * keys).sum(0);  // r_p: [2, D+1]
    out.key[p].copy_(shared[0]);
    out.key[p + half].copy_(shared[1]);
    const torch::Tensor scale = torch::where(root > 0, top / root, torch::zeros_like(top));
    out.query_scale.select(1, p).copy_(scale);
    out.query_scale.select(1, p + half).copy_(scale);
  }
  return out;
}

// Each head's query rows: its content channels, then its kept RoPE pairs times its group's
// factors: [H, d, D+1]
torch::Tensor split_queries(const SourceAttention& source, const RotarySplit& split,
                            const SharedRope* rope) {
  const torch::Tensor content = source.q.index_select(1, index_of(split.content));
  if (split.rotary.empty()) return content;
  const torch::Tensor scale =
      rope->query_scale.repeat_interleave(source.heads_per_group(), 0).unsqueeze(-1);  // [H, dr, 1]
  return torch::cat({content, source.q.index_select(1, index_of(split.rotary)) * scale}, 1);
}

}  // namespace

std::vector<LayerCandidate> convert_to_grouped(const SourceAttention& source,
                                               const torch::Tensor& /*moment*/,
                                               const AttentionSpec& target) {
  const int64_t G = target.n_groups;
  const bool bias = input_bias(target);
  Parameters p;
  put_projection(p, "q_proj", source.q, bias);
  put_projection(p, "k_proj", merge_groups(source.k, G), bias);
  put_projection(p, "v_proj", merge_groups(source.v, G), bias);
  put_output(p, source, source.o_weight);
  return {{G == source.spec.n_groups ? "copy" : "mean-pool", p, std::nullopt}};
}

std::vector<LayerCandidate> convert_to_shared_kv(const SourceAttention& source,
                                                 const torch::Tensor& moment,
                                                 const AttentionSpec& target) {
  const int64_t H = source.spec.n_heads, G = target.n_groups, d = source.spec.head_dim;
  const torch::Tensor k = merge_groups(source.k, G);  // [G, d, D+1]
  const torch::Tensor v = merge_groups(source.v, G);
  // summed over each target group's heads: [G, d, d]
  const torch::Tensor key_weight =
      (query_weight(source, moment, target.pos == PosScheme::kRope) / static_cast<double>(d))
          .view({G, H / G, d, d})
          .sum(1);
  const torch::Tensor o = output_columns(source);  // [H, D, d]
  const torch::Tensor value_weight =
      torch::matmul(o.transpose(1, 2), o).view({G, H / G, d, d}).sum(1);
  const torch::Tensor least_squares = solve_psd(
      key_weight + value_weight, torch::matmul(key_weight, k) + torch::matmul(value_weight, v));
  const bool bias = input_bias(target);
  std::vector<LayerCandidate> out;
  const std::pair<const char*, torch::Tensor> streams[] = {
      {"average", (k + v) / 2}, {"keep-k", k}, {"keep-v", v}, {"least-squares", least_squares}};
  for (const auto& [method, kv] : streams) {
    Parameters p;
    put_projection(p, "q_proj", source.q, bias);
    put_projection(p, "kv_proj", kv, bias);
    put_output(p, source, source.o_weight);
    out.push_back({method, p, std::nullopt});
  }
  return out;
}

std::vector<LayerCandidate> convert_to_grouped_value(const SourceAttention& source,
                                                     const torch::Tensor& moment,
                                                     const AttentionSpec& target,
                                                     const RotarySelection& rotary) {
  const int64_t H = source.spec.n_heads, Gs = source.spec.n_groups, G = target.n_groups;
  const int64_t d = source.spec.head_dim, dn = target.nope_dim, dr = target.rope_dim;
  const bool gta = target.family() == AttnFamily::kGta;
  const RotarySplit split = split_channels(d, dr, rotary);
  const torch::Tensor q_content =
      source.q.index_select(1, index_of(split.content));  // [H, dn, D+1]
  const torch::Tensor k_content =
      source.k.index_select(1, index_of(split.content));  // [Gs, dn, D+1]
  const torch::Tensor v = merge_groups(source.v, G);      // [G, d, D+1]
  const bool bias = input_bias(target);
  Parameters p;
  if (dr > 0) {
    const SharedRope rope = shared_rope(source, moment, split);
    put_projection(p, "q_proj", split_queries(source, split, &rope), bias);
    put_projection(p, "r_proj", rope.key, bias);
  } else {
    put_projection(p, "q_proj", split_queries(source, split, nullptr), bias);
  }
  const torch::Tensor vh = v.repeat_interleave(H / G, 0);           // [H, d, D+1]
  const torch::Tensor kh = k_content.repeat_interleave(H / Gs, 0);  // [H, dn, D+1]
  const torch::Tensor value_gram = cross_moment(v, moment, v);      // [G, d, d]
  const torch::Tensor value_key = cross_moment(vh, moment, kh);     // E[v kᵀ]: [H, d, dn]
  if (!gta) {
    put_projection(p, "v_proj", v, bias);
    p["key_maps"] = solve_psd(value_gram.repeat_interleave(H / G, 0), value_key);  // [H, d, dn]
    put_output(p, source, source.o_weight);
    return {{"least-squares", p, std::nullopt}};
  }
  // gta: one map per group, weighted by the second moment of each head's content query
  const torch::Tensor query_gram = cross_moment(q_content, moment, q_content);  // [H, dn, dn]
  const torch::Tensor weighted =
      torch::matmul(value_key, query_gram).view({G, H / G, d, dn}).sum(1);  // [G, d, dn]
  const torch::Tensor weight_sum = query_gram.view({G, H / G, dn, dn}).sum(1);
  torch::Tensor maps = solve_psd(value_gram, weighted);                // [G, d, dn]
  maps = solve_psd(weight_sum, maps.transpose(1, 2)).transpose(1, 2);  // · (Σ_h Σ_h)⁻¹
  std::vector<torch::Tensor> tied, inverses;
  for (int64_t g = 0; g < G; ++g) {
    const torch::Tensor m = maps[g];                                                  // [d, dn]
    const torch::Tensor basis = std::get<0>(torch::linalg_qr(m, "complete"));         // [d, d]
    const torch::Tensor a = torch::cat({m.t(), basis.narrow(1, dn, d - dn).t()}, 0);  // [d, d]
    const torch::Tensor singular = torch::linalg_svdvals(a);
    if (singular.min().item<double>() <= 1e-12 * singular.max().item<double>()) {
      throw SpecError("attn", "gta: group " + std::to_string(g) +
                                  "'s values do not determine its content key (the fitted map "
                                  "has rank below d_h − d_r); no tied state reproduces it");
    }
    tied.push_back(torch::matmul(a, v[g]));
    inverses.push_back(torch::linalg_inv(a));
  }
  put_projection(p, "v_proj", torch::stack(tied), bias);
  // head h's output columns times A_g(h)⁻¹: [H, D, d]
  const torch::Tensor o =
      torch::matmul(output_columns(source), torch::stack(inverses).repeat_interleave(H / G, 0));
  put_output(p, source, o.permute({1, 0, 2}).reshape({o.size(1), H * d}).contiguous());
  return {{"least-squares", p, std::nullopt}};
}

std::vector<LayerCandidate> convert_to_latent(const SourceAttention& source,
                                              const torch::Tensor& moment,
                                              const AttentionSpec& target,
                                              const RotarySelection& rotary) {
  const int64_t H = source.spec.n_heads, Gs = source.spec.n_groups, d = source.spec.head_dim;
  const int64_t dn = target.nope_dim, dr = target.rope_dim, dc = target.latent_dim;
  const int64_t D1 = source.q.size(2);
  const RotarySplit split = split_channels(d, dr, rotary);
  // z = [every group's content key ; every group's value]: [Gs·(dn + d), D+1]
  const torch::Tensor keys =
      source.k.index_select(1, index_of(split.content)).reshape({Gs * dn, D1});
  const torch::Tensor values = source.v.reshape({Gs * d, D1});
  // each block scaled to unit mean energy per channel, so that neither dominates the PCA
  const auto scale_of = [&](const torch::Tensor& rows) {
    const double energy = (torch::matmul(rows, moment) * rows).sum().item<double>() /
                          static_cast<double>(rows.size(0));
    return energy > 0 ? 1.0 / std::sqrt(energy) : 1.0;
  };
  const double key_scale = scale_of(keys), value_scale = scale_of(values);
  const torch::Tensor z = torch::cat({keys * key_scale, values * value_scale});
  const int64_t rows = z.size(0);
  const auto [eigenvalues, eigenvectors] = torch::linalg_eigh(cross_moment(z, moment, z));
  // the top dc directions (eigh sorts ascending); fewer rows than dc leaves latent channels unused
  const int64_t kept = std::min(dc, rows);
  const torch::Tensor u = torch::zeros({rows, dc}, z.options());
  u.narrow(1, 0, kept).copy_(eigenvectors.narrow(1, rows - kept, kept).flip(1));
  const torch::Tensor positive = eigenvalues.clamp_min(0);
  const double total = positive.sum().item<double>();
  const double explained =
      total > 0 ? positive.narrow(0, rows - kept, kept).sum().item<double>() / total : 1.0;
  // latent c = Uᵀ z; z ≈ U c, unscaled block by block
  const torch::Tensor up = u.clone();
  up.narrow(0, 0, Gs * dn).div_(key_scale);
  up.narrow(0, Gs * dn, Gs * d).div_(value_scale);
  const torch::Tensor key_up = up.narrow(0, 0, Gs * dn).view({Gs, dn, dc});
  const torch::Tensor value_up = up.narrow(0, Gs * dn, Gs * d).view({Gs, d, dc});
  const int64_t per_group = H / Gs;
  // kv_b_proj, head h's rows: W_uk,h then W_uv,h, from its source group: [H·(dn + d), dc]
  const torch::Tensor kv_b = torch::cat({key_up, value_up}, 1).repeat_interleave(per_group, 0);
  const bool bias = input_bias(target);
  Parameters p;
  const SharedRope rope = shared_rope(source, moment, split);
  put_projection(p, "q_proj", split_queries(source, split, &rope), bias);
  put_projection(p, "kv_a_proj_with_mqa", torch::cat({torch::matmul(u.t(), z), rope.key}), bias);
  p["kv_b_proj.weight"] = kv_b.reshape({H * (dn + d), dc}).contiguous();
  if (source.o_bias.defined()) p["kv_b_proj.bias"] = torch::zeros({H * (dn + d)}, z.options());
  put_output(p, source, source.o_weight);
  return {{"joint-pca", p, explained}};
}

}  // namespace kvlab::convert
