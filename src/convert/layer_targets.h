#pragma once

#include <torch/torch.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "convert/rotary_selection.h"
#include "convert/source_attention.h"

namespace kvlab::convert {

// One converted attention layer: its parameters in f64, named as the target's module names
// them ("q_proj.weight", "key_maps", ...), and how they were made.
struct LayerCandidate {
  std::string method;
  std::map<std::string, torch::Tensor> parameters;
  std::optional<double> explained_variance;  // mla: the latent's share of the key/value energy
};

// Every function below takes the source layer, the mean moment of [x ; 1] over the
// calibration tokens ([D+1, D+1]) and the target spec (its groups dividing the source's).

// mha / gqa:G / mqa: key and value heads mean-pooled into the target's groups (Ainslie et al.).
// One candidate.
std::vector<LayerCandidate> convert_to_grouped(const SourceAttention& source,
                                               const torch::Tensor& moment,
                                               const AttentionSpec& target);

// q-kv / q-gqa:G / q-mqa: one stream C = W_kv x serves as key and value. Four candidates:
// "average" (W_k + W_v)/2, "keep-k", "keep-v", and "least-squares": the W_kv minimising, per
// token, the query-weighted key error E[(q_h·(k − c))²]/d plus the value error through the
// output projection E‖W_o,h (v − c)‖², summed over the group's heads (with RoPE the query
// weight is averaged over each pair's rotations: one weight per pair).
std::vector<LayerCandidate> convert_to_shared_kv(const SourceAttention& source,
                                                 const torch::Tensor& moment,
                                                 const AttentionSpec& target);

// gva:G,dr (target nope_dim = d_h − d_r) and gta:G,dr. Queries: each head's content channels,
// then its kept RoPE pairs. Values: mean-pooled into the target's groups. The shared RoPE key:
// per pair, the rank-one fit a_g·r_p of the groups' rotary keys weighted by the energy of the
// queries that read them, a_g folded into the queries (RoPE commutes with mixing groups). gva: M_h
// by least squares, V_g M_h ≈ the head's content key (with M_h free per head a weight on the key
// error cannot change the minimiser). gta: one map M_g per group, weighted by its heads' query
// second moments, then the tied state t_g = A_g v_g with A_g = [M_gᵀ ; an orthonormal completion],
// so t_g's first d_h − d_r channels are the content key, and A_g⁻¹ folded into the output
// projection. With dr = 0 (gva only) every channel is content and keeps its full-width RoPE. One
// candidate. Throws SpecError when a gta value map is singular.
std::vector<LayerCandidate> convert_to_grouped_value(const SourceAttention& source,
                                                     const torch::Tensor& moment,
                                                     const AttentionSpec& target,
                                                     const RotarySelection& rotary);

// mla:dc,dr,plainlatent with dn = d_h − d_r, dv = d_h, full-rank queries (TransMLA / MHA2MLA
// style): queries and the shared RoPE key as for gva; then one latent for every head from a
// PCA of z = [each group's content key ; each group's value] on the calibration activations
// (each block scaled to unit mean energy): W_dkv = Uᵀ, [W_uk ; W_uv] = U for the top d_c
// directions U. Exact when z has rank ≤ d_c (and the rotary keys are equal across groups).
std::vector<LayerCandidate> convert_to_latent(const SourceAttention& source,
                                              const torch::Tensor& moment,
                                              const AttentionSpec& target,
                                              const RotarySelection& rotary);

}  // namespace kvlab::convert
