// ProgressReporter (see progress.h).
#include "train/progress.h"

#include "core/check.h"
#include "core/fd_write.h"
#include "profiling/process_stats.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace zest {

ProgressReporter::ProgressReporter(bool is_active, int64_t total_steps, const std::string& metrics_path,
                                   const std::string& items_name)
    : is_active_(is_active),
      is_tty_(is_active && ::isatty(STDOUT_FILENO)),
      total_steps_(total_steps),
      items_name_(items_name),
      metrics_path_(metrics_path) {
  if (is_active_ && !metrics_path.empty()) {
    // Never through a symbolic link: a planted metrics.jsonl link must not make the run append elsewhere.
    metrics_fd_ = ::open(metrics_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (metrics_fd_ < 0 && errno == ELOOP)
      throw Error("cannot open " + metrics_path + " for writing: it is a symbolic link, and zest does not write "
                  "through links (remove it; the run creates the file)");
    if (metrics_fd_ < 0) throw Error("cannot open " + metrics_path + " for writing: " + std::strerror(errno));
  }
  started_s_ = now_seconds();
}

ProgressReporter::~ProgressReporter() {
  if (metrics_fd_ >= 0) ::close(metrics_fd_);  // only on an error path: finish() closes it and checks
}

void ProgressReporter::record(const StepRecord& r) {
  if (!is_active_) return;
  if (first_step_ < 0) first_step_ = r.step - r.steps;
  write_jsonl(r);
  print_line(r, /*is_bar=*/is_tty_);
}

void ProgressReporter::write_jsonl(const StepRecord& r) {
  if (metrics_fd_ < 0) return;
  const nlohmann::json j = {{"step", r.step},
                            {"steps", r.steps},
                            {"loss", r.loss},
                            {"lr", r.lr},
                            {"loss_scale", r.loss_scale},
                            {"grad_norm", std::isfinite(r.grad_norm) ? nlohmann::json(r.grad_norm) : nlohmann::json()},
                            {"skipped", r.skipped},
                            {"skipped_total", r.skipped_total},
                            {"samples_per_s", r.samples_per_s},
                            {"items_per_s", r.items_per_s},
                            {"step_ms", r.step_ms},
                            {"data_wait_ms", r.data_wait_ms},
                            {"host_rss_bytes", r.host_rss_bytes},
                            {"host_peak_rss_bytes", r.host_peak_rss_bytes}};
  nlohmann::json record = j;
  if (r.gpu_peak_allocated_bytes >= 0) {
    record["gpu_peak_allocated_bytes"] = r.gpu_peak_allocated_bytes;
    record["gpu_peak_reserved_bytes"] = r.gpu_peak_reserved_bytes;
  }
  if (r.saved) {
    record["checkpoint_stall_ms"] = r.checkpoint_stall_ms;
    record["checkpoint_wait_ms"] = r.checkpoint_wait_ms;
    record["checkpoint_staging_bytes"] = r.checkpoint_staging_bytes;
  }
  append_line(record.dump() + "\n");
}

void ProgressReporter::record_line(const std::string& json_object) {
  if (is_active_) append_line(json_object + "\n");
}

void ProgressReporter::append_line(const std::string& line) {
  if (metrics_fd_ < 0) return;
  // One unbuffered write per record: a crash loses no logged step, and a full disk is found at this
  // step, not at exit. A short write is cut off again, so the file never ends in half a line.
  const off_t before = ::lseek(metrics_fd_, 0, SEEK_END);
  if (write_all(metrics_fd_, line)) return;
  const std::string reason = std::strerror(errno);
  if (before >= 0 && ::ftruncate(metrics_fd_, before) != 0) {
    // Nothing more to do: the error below is what matters.
  }
  throw Error("cannot write " + metrics_path_ + ": " + reason);
}

void ProgressReporter::print_line(const StepRecord& r, bool is_bar) {
  const double elapsed = now_seconds() - started_s_;
  const int64_t done = r.step - first_step_;
  const double eta = done > 0 ? elapsed / done * static_cast<double>(total_steps_ - r.step) : 0.0;
  constexpr double kGiB = 1073741824.0;
  char gpu[96] = "";
  if (r.gpu_peak_allocated_bytes >= 0)
    std::snprintf(gpu, sizeof(gpu), " | gpu peak %.2f GiB alloc, %.2f GiB reserved", r.gpu_peak_allocated_bytes / kGiB,
                  r.gpu_peak_reserved_bytes / kGiB);
  char saved[96] = "";
  if (r.saved) std::snprintf(saved, sizeof(saved), " | ckpt stall %.0f ms", r.checkpoint_stall_ms);
  char text[640];
  std::snprintf(text, sizeof(text),
                "step %lld/%lld | loss %.4f | lr %.3g | scale %g | gnorm %.3g%s | %.1f samples/s | %.3g %s/s | "
                "%.0f ms | data wait %.1f ms%s | host rss %.2f GiB%s | eta %.0fs",
                static_cast<long long>(r.step), static_cast<long long>(total_steps_), r.loss, r.lr, r.loss_scale,
                r.grad_norm, r.skipped ? " (skipped)" : "", r.samples_per_s, r.items_per_s, items_name_.c_str(),
                r.step_ms, r.data_wait_ms, gpu, r.host_rss_bytes / kGiB, saved, eta);
  if (!is_bar) {
    emit(std::string(text) + "\n");
    return;
  }
  const int width = 20;
  const int filled = total_steps_ > 0 ? static_cast<int>(width * std::min(r.step, total_steps_) / total_steps_) : width;
  emit("\r[" + std::string(filled, '#') + std::string(width - filled, '.') + "] " + text + "\033[K");
  bar_open_ = true;
}

void ProgressReporter::emit(const std::string& text) {
  if (stdout_gone_) return;
  if (std::fwrite(text.data(), 1, text.size(), stdout) == text.size() && std::fflush(stdout) == 0) return;
  const int error = errno;
  std::clearerr(stdout);
  if (error == EPIPE) {  // nobody reads our output any more (zest launch was killed): keep training quietly
    stdout_gone_ = true;
    return;
  }
  throw Error(std::string("cannot write the progress output (stdout): ") + std::strerror(error));
}

void ProgressReporter::message(const std::string& text) {
  if (!is_active_) return;
  emit((bar_open_ ? "\n" : "") + text + "\n");
  bar_open_ = false;
}

void ProgressReporter::finish() {
  if (!is_active_) return;
  if (bar_open_) emit("\n");
  bar_open_ = false;
  if (metrics_fd_ >= 0) {
    const int fd = metrics_fd_;
    metrics_fd_ = -1;
    if (::close(fd) != 0) throw Error("cannot write " + metrics_path_ + ": " + std::strerror(errno));
  }
}

}  // namespace zest
