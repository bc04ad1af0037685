// Host AdamW and SGD passes (see host_update.h). Every scalar the loop reads is copied to a local first:
// read through the HostUpdate reference, the compiler must assume the float stores alias it and reloads
// it each element, which keeps the loop scalar.
#include "optim/host_update.h"

#include "core/check.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>

namespace zest {
namespace {

// m ← m + (1−β1)(g − m) (ATen's lerp for weights < 0.5); v ← β2·v + (1−β2)·g²;
// p ← p·(1 − lr·wd) − step_size · m / (√v / √(1−β2^t) + ε).
template <typename Grad, typename Param>
void adamw_range(const HostUpdate& u, bool decay, float* __restrict master, float* __restrict m,
                 float* __restrict v, const Grad* __restrict grad, Param* __restrict param, int64_t n) {
  const float decay_factor = decay ? 1.0f - u.lr * u.weight_decay : 1.0f;
  const float multiplier = u.multiplier, beta1 = u.beta1, beta2 = u.beta2, step_size = u.step_size;
  const float bias_correction2_sqrt = u.bias_correction2_sqrt, eps = u.eps;
  for (int64_t i = 0; i < n; ++i) {
    const float g = static_cast<float>(grad[i]) * multiplier;
    const float mi = m[i] + (1.0f - beta1) * (g - m[i]);
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float p = master[i] * decay_factor - step_size * mi / (std::sqrt(vi) / bias_correction2_sqrt + eps);
    m[i] = mi;
    v[i] = vi;
    master[i] = p;
    param[i] = static_cast<Param>(p);
  }
}

// g ← g + wd·p; b ← μ·b + g (b = g on the first step); g ← g + μ·b (Nesterov) or b; p ← p − lr·g.
template <typename Grad, typename Param>
void sgd_range(const HostUpdate& u, bool decay, float* __restrict master, float* __restrict buf,
               const Grad* __restrict grad, Param* __restrict param, int64_t n) {
  const float wd = decay ? u.weight_decay : 0.0f;
  const float multiplier = u.multiplier, momentum = u.momentum, lr = u.lr;
  const bool first_step = u.first_sgd_step, nesterov = u.nesterov;
  for (int64_t i = 0; i < n; ++i) {
    float g = static_cast<float>(grad[i]) * multiplier + wd * master[i];
    if (buf != nullptr) {
      const float b = first_step ? g : momentum * buf[i] + g;
      buf[i] = b;
      g = nesterov ? g + momentum * b : b;
    }
    master[i] -= lr * g;
    param[i] = static_cast<Param>(master[i]);
  }
}

template <typename Fn>
void with_element_types(c10::ScalarType grad, c10::ScalarType param, Fn&& fn) {
  auto with_param = [&](auto grad_tag) {
    using G = decltype(grad_tag);
    switch (param) {
      case c10::ScalarType::Float: return fn(G{}, float{});
      case c10::ScalarType::BFloat16: return fn(G{}, c10::BFloat16{});
      case c10::ScalarType::Half: return fn(G{}, c10::Half{});
      default: ZEST_FAIL("host update: parameter dtype ", param, " is not fp32, bf16 or fp16");
    }
  };
  switch (grad) {
    case c10::ScalarType::Float: return with_param(float{});
    case c10::ScalarType::BFloat16: return with_param(c10::BFloat16{});
    case c10::ScalarType::Half: return with_param(c10::Half{});
    default: ZEST_FAIL("host update: gradient dtype ", grad, " is not fp32, bf16 or fp16");
  }
}

}  // namespace

bool is_host_update_dtype(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Float || dtype == c10::ScalarType::BFloat16 || dtype == c10::ScalarType::Half;
}

void adamw_update(const HostUpdate& u, bool decay, const HostRange& r) {
  with_element_types(r.grad_dtype, r.param_dtype, [&](auto grad_tag, auto param_tag) {
    using G = decltype(grad_tag);
    using P = decltype(param_tag);
    adamw_range(u, decay, r.master, r.first, r.second, static_cast<const G*>(r.grad), static_cast<P*>(r.param), r.n);
  });
}

void sgd_update(const HostUpdate& u, bool decay, const HostRange& r) {
  with_element_types(r.grad_dtype, r.param_dtype, [&](auto grad_tag, auto param_tag) {
    using G = decltype(grad_tag);
    using P = decltype(param_tag);
    sgd_range(u, decay, r.master, r.first, static_cast<const G*>(r.grad), static_cast<P*>(r.param), r.n);
  });
}

}  // namespace zest
