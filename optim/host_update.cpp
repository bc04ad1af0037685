// The host pass of an update rule (see host_update.h). Every scalar the loop reads is copied to a local
// first: read through a reference, the compiler must assume the float stores alias it and reloads it
// each element, which keeps the loop scalar.
#include "optim/host_update.h"

#include "core/check.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <type_traits>


namespace zest {
namespace {

// The parameter type of a range without a parameter copy (HostRange::param null): nothing is written.
struct NoParam {};

template <typename Rule, typename Grad, typename Param>
void update_range(const OptimHyper& hyper, const StepValues& step, bool decay, float* __restrict master,
                  float* __restrict s0, float* __restrict s1, const Grad* __restrict grad,
                  Param* __restrict param, int64_t n) {
  const OptimHyper h = hyper;
  const StepValues s = step;
  const float wd = decay ? h.weight_decay : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = static_cast<float>(grad[i]) * s.multiplier;
    const float p = update_element<Rule>(h, s, wd, g, master[i], s0, s1, i);
    master[i] = p;
    if constexpr (!std::is_same_v<Param, NoParam>) param[i] = static_cast<Param>(p);
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
      case c10::ScalarType::Undefined: return fn(G{}, NoParam{});
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

void host_update(OptimizerKind kind, const OptimHyper& hyper, const StepValues& step, bool decay,
                 const HostRange& r) {
  with_rule(kind, [&]<typename Rule>(Rule) {
    with_element_types(r.grad_dtype, r.param_dtype, [&](auto grad_tag, auto param_tag) {
      using G = decltype(grad_tag);
      using P = decltype(param_tag);
      update_range<Rule>(hyper, step, decay, r.master, r.state[0], r.state[1], static_cast<const G*>(r.grad),
                         static_cast<P*>(r.param), r.n);
    });
  });
}

}  // namespace zest
