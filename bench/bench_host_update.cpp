// Host-update benchmark: the offloaded optimizer's fused AdamW pass (optim/host_update.h) over N elements
// of fp32 master and state, fp32 gradients in and bf16 parameters out (the bench runs' dtypes), split
// into 64K-element chunks over T threads as OffloadedOptimizer does. Prints one JSON line: elements per
// second and the implied memory traffic (30 bytes per element: 4 reads and 4 writes of fp32 less the
// parameter's 2-byte write).
//   bench_host_update [--numel N] [--threads T] [--repeats R]
#include "optim/host_update.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int64_t numel = 512LL << 20;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int repeats = 5;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const long long value = std::atoll(argv[i + 1]);
    if (key == "--numel") o.numel = value;
    else if (key == "--threads") o.threads = static_cast<int>(value);
    else if (key == "--repeats") o.repeats = static_cast<int>(value);
    else {
      std::fprintf(stderr, "bench_host_update: unknown option %s (--numel, --threads, --repeats)\n", key.c_str());
      std::exit(2);
    }
  }
  if (o.numel < 1 || o.threads < 1 || o.repeats < 1) {
    std::fprintf(stderr, "bench_host_update: --numel, --threads and --repeats must be >= 1\n");
    std::exit(2);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  constexpr int64_t kChunk = 1 << 16;
  std::vector<float> master(o.numel, 0.5f), m(o.numel, 0.0f), v(o.numel, 0.0f), grad(o.numel, 1e-3f);
  std::vector<uint16_t> param(o.numel);  // bf16 bits
  zest::OptimHyper hyper;  // AdamW's defaults, weight decay 0.01
  hyper.weight_decay = 0.01f;
  zest::StepValues step;
  step.lr = 1e-4f;
  step.step_size = 1e-3f;
  step.bias_correction2_sqrt = 0.03f;
  double best_s = 1e30;
  for (int r = 0; r < o.repeats; ++r) {
    std::atomic<int64_t> next{0};
    const auto start = std::chrono::steady_clock::now();
    {
      std::vector<std::jthread> workers;
      for (int t = 0; t < o.threads; ++t) {
        workers.emplace_back([&] {
          for (int64_t b = next.fetch_add(kChunk); b < o.numel; b = next.fetch_add(kChunk)) {
            const int64_t n = std::min(kChunk, o.numel - b);
            zest::host_update(zest::OptimizerKind::adamw, hyper, step, true,
                              {master.data() + b, {m.data() + b, v.data() + b}, grad.data() + b,
                               c10::ScalarType::Float, param.data() + b, c10::ScalarType::BFloat16, n});
          }
        });
      }
    }
    best_s = std::min(best_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double per_s = static_cast<double>(o.numel) / best_s;
  std::printf("{\"bench\": \"host_update\", \"numel\": %lld, \"threads\": %d, \"best_ms\": %.2f, "
              "\"elements_per_s\": %.4g, \"memory_gb_per_s\": %.1f}\n",
              static_cast<long long>(o.numel), o.threads, best_s * 1e3, per_s, per_s * 30 / 1e9);
  return 0;
}
