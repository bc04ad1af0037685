// Training progress on rank 0: a live progress bar on a terminal (step/total, ETA, loss, lr, loss scale,
// grad norm, samples/s, memory), plain periodic lines otherwise, and RUN_DIR/metrics.jsonl.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace zest {

struct StepRecord {
  int64_t step = 0;
  double loss = 0.0;            // mean over ranks and micro-batches
  double lr = 0.0;
  double loss_scale = 1.0;
  double grad_norm = 0.0;
  bool skipped = false;
  int64_t skipped_total = 0;
  double step_ms = 0.0;         // slowest rank's wall time of the step
  double samples_per_s = 0.0;   // global samples per second
  double items_per_s = 0.0;     // frames (HY-Motion) or latent pixels (UNet) per second
  int64_t peak_mem_bytes = 0;   // max over ranks
};

class ProgressReporter {
 public:
  // is_active: rank 0 only. metrics_path: "" to skip the JSONL file. Appends when resuming.
  ProgressReporter(bool is_active, int64_t total_steps, int log_every, const std::string& metrics_path,
                   const std::string& items_name);
  ~ProgressReporter();
  void record(const StepRecord& r);  // every step; prints / writes on log steps
  void message(const std::string& text);  // a line that does not break the bar
  void finish();

 private:
  void write_jsonl(const StepRecord& r);
  void print_line(const StepRecord& r, bool is_bar);

  bool is_active_;
  bool is_tty_;
  int64_t total_steps_;
  int log_every_;
  std::string items_name_;
  std::FILE* metrics_ = nullptr;
  double started_s_ = 0.0;
  int64_t first_step_ = -1;
  bool bar_open_ = false;
};

// Peak memory of this process: CUDA max allocated when on GPU, else the peak resident set size.
int64_t peak_memory_bytes();
double now_seconds();

}  // namespace zest
