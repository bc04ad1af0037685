// Training progress on rank 0: a live progress bar on a terminal (step/total, ETA, loss, lr, loss scale,
// grad norm, samples/s, memory), plain lines otherwise, and RUN_DIR/metrics.jsonl, one record per
// logged step. Every write is checked: a failure (a full disk) is an error, except a closed stdout
// (the launcher was killed), which only silences the output so that the run can still save.
#pragma once

#include <cstdint>
#include <string>

namespace zest {

// The figures of one logged step. The loss and the rates cover every step since the previous record
// (`steps` of them): reading the loss is the one device synchronisation, so it happens on logged steps only.
struct StepRecord {
  int64_t step = 0;
  int64_t steps = 1;            // optimizer steps this record averages over (since the previous one)
  double loss = 0.0;            // mean over those steps, their micro-batches and the ranks
  double lr = 0.0;              // at `step`
  double loss_scale = 1.0;      // at `step`
  double grad_norm = 0.0;       // of `step`
  bool skipped = false;         // `step` was skipped (non-finite gradients)
  int64_t skipped_total = 0;
  double step_ms = 0.0;         // mean wall time per step (slowest rank)
  double samples_per_s = 0.0;   // global samples per second
  double items_per_s = 0.0;     // frames (HY-Motion) or latent pixels (UNet) per second
  // Memory, max over ranks: the GPU caching allocator's peak allocated and reserved bytes since the
  // previous record (-1 without a GPU), and the host's resident set now and at its peak.
  int64_t gpu_peak_allocated_bytes = -1;
  int64_t gpu_peak_reserved_bytes = -1;
  int64_t host_rss_bytes = 0;
  int64_t host_peak_rss_bytes = 0;
  double data_wait_ms = 0.0;    // mean per step the step loop waited for the loader (slowest rank)
  // The checkpoint saved at `step` (when one was): how long training stood still for it, of which
  // waiting for the previous save's background write, and the page-locked staging it was copied to.
  bool saved = false;
  double checkpoint_stall_ms = 0.0;
  double checkpoint_wait_ms = 0.0;
  int64_t checkpoint_staging_bytes = 0;
};

class ProgressReporter {
 public:
  // is_active: rank 0 only. metrics_path: "" to skip the JSONL file; appended to (a resumed run
  // continues its records). Opening it is checked here.
  ProgressReporter(bool is_active, int64_t total_steps, const std::string& metrics_path,
                   const std::string& items_name);
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  void record(const StepRecord& r);        // one metrics line and a progress line (or the bar)
  void message(const std::string& text);   // a line that does not break the bar
  void record_line(const std::string& json_object);  // another metrics.jsonl record (e.g. validation samples)
  void finish();                           // ends the bar, closes metrics.jsonl (checked)
  // A failed write leaves metrics.jsonl as it was before it (no half line at its end).

 private:
  void write_jsonl(const StepRecord& r);
  void append_line(const std::string& line);  // checked; a failed write leaves no half line
  void print_line(const StepRecord& r, bool is_bar);
  void emit(const std::string& text);      // to stdout, checked (see the header comment)

  bool is_active_;
  bool is_tty_;
  bool stdout_gone_ = false;
  int64_t total_steps_;
  std::string items_name_;
  std::string metrics_path_;
  int metrics_fd_ = -1;
  double started_s_ = 0.0;
  int64_t first_step_ = -1;
  bool bar_open_ = false;
};

}  // namespace zest
