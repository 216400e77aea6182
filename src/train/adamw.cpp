#include "train/adamw.h"

#include <cmath>

#include "io/safetensors.h"
#include "nn/checkpoint.h"

namespace kvlab::train {

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, Options options)
    : options_(options) {
  for (auto& [name, p] : params) {
    slots_.push_back({name, p, torch::zeros_like(p), torch::zeros_like(p), p.dim() >= 2});
  }
}

void AdamW::zero_grad() {
  for (Slot& s : slots_) {
    if (s.param.grad().defined()) s.param.mutable_grad().zero_();
  }
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double correction1 = 1.0 - std::pow(b1, static_cast<double>(steps_));
  const double correction2 = 1.0 - std::pow(b2, static_cast<double>(steps_));
  for (Slot& s : slots_) {
    const torch::Tensor& g = s.param.grad();
    if (!g.defined()) continue;
    if (s.decay && options_.weight_decay > 0) s.param.mul_(1.0 - lr * options_.weight_decay);
    s.exp_avg.mul_(b1).add_(g, 1.0 - b1);
    s.exp_avg_sq.mul_(b2).addcmul_(g, g, 1.0 - b2);
    const torch::Tensor denom = (s.exp_avg_sq / correction2).sqrt_().add_(options_.eps);
    s.param.addcdiv_(s.exp_avg, denom, -lr / correction1);
  }
}

std::map<std::string, torch::Tensor> AdamW::state() const {
  std::map<std::string, torch::Tensor> out;
  for (const Slot& s : slots_) {
    out.emplace(s.name + ".exp_avg", s.exp_avg);
    out.emplace(s.name + ".exp_avg_sq", s.exp_avg_sq);
  }
  out.emplace("step", torch::tensor({steps_}, torch::kInt64));
  return out;
}

void AdamW::load_state(const std::map<std::string, torch::Tensor>& state, const std::string& what) {
  std::map<std::string, torch::Tensor> targets;
  for (Slot& s : slots_) {
    targets.emplace(s.name + ".exp_avg", s.exp_avg);
    targets.emplace(s.name + ".exp_avg_sq", s.exp_avg_sq);
  }
  std::map<std::string, torch::Tensor> moments = state;
  const auto step = moments.find("step");
  if (step == moments.end() || step->second.numel() != 1) {
    throw SafetensorsError(what + ": tensor 'step' is missing");
  }
  steps_ = step->second.to(torch::kInt64).item<int64_t>();
  moments.erase(step);
  nn::copy_by_name(moments, targets, what);
}

double learning_rate(int64_t step, int64_t total, int64_t warmup, double peak, double floor) {
  if (warmup > 0 && step < warmup) {
    return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  }
  const double span = static_cast<double>(std::max<int64_t>(1, total - warmup));
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return peak * (floor + (1.0 - floor) * cosine);
}

}  // namespace kvlab::train
