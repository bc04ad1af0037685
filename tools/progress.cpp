// ProgressReporter (see progress.h).
#include "tools/progress.h"

#include "core/check.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <sys/resource.h>
#include <unistd.h>

namespace zest {

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

int64_t peak_memory_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

ProgressReporter::ProgressReporter(bool is_active, int64_t total_steps, int log_every,
                                   const std::string& metrics_path, const std::string& items_name)
    : is_active_(is_active),
      is_tty_(is_active && ::isatty(STDOUT_FILENO)),
      total_steps_(total_steps),
      log_every_(std::max(1, log_every)),
      items_name_(items_name) {
  if (is_active_ && !metrics_path.empty()) {
    metrics_ = std::fopen(metrics_path.c_str(), "a");
    ZEST_CHECK(metrics_ != nullptr, "cannot open ", metrics_path, " for writing");
  }
  started_s_ = now_seconds();
}

ProgressReporter::~ProgressReporter() {
  finish();
  if (metrics_) std::fclose(metrics_);
}

void ProgressReporter::record(const StepRecord& r) {
  if (!is_active_) return;
  if (first_step_ < 0) first_step_ = r.step - 1;
  const bool is_log_step = r.step % log_every_ == 0 || r.step == total_steps_ || r.skipped;
  if (is_log_step) write_jsonl(r);
  if (is_tty_) {
    print_line(r, /*is_bar=*/true);
  } else if (is_log_step) {
    print_line(r, /*is_bar=*/false);
  }
}

void ProgressReporter::write_jsonl(const StepRecord& r) {
  if (!metrics_) return;
  const nlohmann::json j = {{"step", r.step},
                            {"loss", r.loss},
                            {"lr", r.lr},
                            {"loss_scale", r.loss_scale},
                            {"grad_norm", std::isfinite(r.grad_norm) ? nlohmann::json(r.grad_norm) : nlohmann::json()},
                            {"skipped", r.skipped},
                            {"skipped_total", r.skipped_total},
                            {"samples_per_s", r.samples_per_s},
                            {"items_per_s", r.items_per_s},
                            {"step_ms", r.step_ms},
                            {"peak_mem_bytes", r.peak_mem_bytes}};
  std::fprintf(metrics_, "%s\n", j.dump().c_str());
  std::fflush(metrics_);
}

void ProgressReporter::print_line(const StepRecord& r, bool is_bar) {
  const double elapsed = now_seconds() - started_s_;
  const int64_t done = r.step - first_step_;
  const double eta = done > 0 ? elapsed / done * static_cast<double>(total_steps_ - r.step) : 0.0;
  char text[512];
  std::snprintf(text, sizeof(text),
                "step %lld/%lld | loss %.4f | lr %.3g | scale %g | gnorm %.3g%s | %.1f samples/s | %.3g %s/s | "
                "%.0f ms | mem %.2f GiB | eta %.0fs",
                static_cast<long long>(r.step), static_cast<long long>(total_steps_), r.loss, r.lr, r.loss_scale,
                r.grad_norm, r.skipped ? " (skipped)" : "", r.samples_per_s, r.items_per_s, items_name_.c_str(),
                r.step_ms, r.peak_mem_bytes / 1073741824.0, eta);
  if (is_bar) {
    const int width = 20;
    const int filled = total_steps_ > 0 ? static_cast<int>(width * r.step / total_steps_) : width;
    std::printf("\r[%s%s] %s\033[K", std::string(filled, '#').c_str(),
                std::string(width - std::min(width, filled), '.').c_str(), text);
    bar_open_ = true;
  } else {
    std::printf("%s\n", text);
  }
  std::fflush(stdout);
}

void ProgressReporter::message(const std::string& text) {
  if (!is_active_) return;
  if (bar_open_) std::printf("\n");
  bar_open_ = false;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

void ProgressReporter::finish() {
  if (bar_open_) std::printf("\n");
  bar_open_ = false;
  std::fflush(stdout);
}

}  // namespace zest
