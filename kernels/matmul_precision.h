// The precision of the Linear layers' training products, [engine] matmul (engine_config.h): "bf16" runs them
// in the compute dtype; "fp8" casts both operands of the forward and input-gradient products to fp8 per
// tensor (kernels/linear_products.h). A process-wide setting, as the kernel switches are: `zest train` and
// `zest bench` set it from the run file; it starts off.
#pragma once

namespace zest {

void set_fp8_training_products(bool on);
bool fp8_training_products();

}  // namespace zest
