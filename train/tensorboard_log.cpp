// TensorBoardLog (see tensorboard_log.h): naming the event file, the tags, and the checked appends.
#include "train/tensorboard_log.h"

#include "core/check.h"
#include "core/config_reader.h"
#include "core/config_writer.h"
#include "core/field_table.h"
#include "core/fd_write.h"
#include "data/gif_write.h"
#include "formats/tensorboard_event.h"
#include "formats/tfrecord.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

namespace zest {
namespace {

namespace fs = std::filesystem;

constexpr char kEventFilePrefix[] = "events.out.tfevents.";
constexpr double kBytesPerGiB = 1073741824.0;

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The host name as a file-name part: letters, digits, '.', '-' and '_' only.
std::string host_name_part() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "host";
  std::string part;
  for (const char* c = host; *c != '\0'; ++c)
    part += (std::isalnum(static_cast<unsigned char>(*c)) || *c == '.' || *c == '-' || *c == '_') ? *c : '_';
  return part.empty() ? "host" : part;
}

// TensorBoard reads a folder's event files in name order, and the name starts with the seconds of its
// creation: a new file gets seconds past every file already there, so that a run resumed within the
// same second (or after the clock stepped back) still sorts after the file it continues.
int64_t next_file_seconds(const fs::path& dir) {
  auto seconds = static_cast<int64_t>(wall_seconds());
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kEventFilePrefix, 0) != 0) continue;
    const std::string digits = name.substr(std::strlen(kEventFilePrefix), 10);
    if (digits.size() == 10 && std::all_of(digits.begin(), digits.end(), ::isdigit))
      seconds = std::max<int64_t>(seconds, std::stoll(digits) + 1);
  }
  return seconds;
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZEST_CHECK(in, "tensorboard: cannot read ", path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The resolved run file as Markdown: a code block (each line indented four spaces), so that TensorBoard's
// text tab shows it verbatim instead of reading its '#' comments as headings.
std::string as_markdown_code(const std::string& text) {
  std::string out;
  bool line_start = true;
  for (const char c : text) {
    if (line_start && c != '\n') out += "    ";
    out += c;
    line_start = c == '\n';
  }
  return out;
}

uint32_t big_endian_u32(const std::string& b, size_t at) {
  return (static_cast<uint32_t>(static_cast<uint8_t>(b[at])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(b[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(b[at + 2])) << 8) | static_cast<uint8_t>(b[at + 3]);
}

uint32_t little_endian_u16(const std::string& b, size_t at) {
  return static_cast<uint32_t>(static_cast<uint8_t>(b[at])) | (static_cast<uint32_t>(static_cast<uint8_t>(b[at + 1])) << 8);
}

}  // namespace

const FieldTable<LogConfig>& log_fields() {
  static const FieldTable<LogConfig> table = [] {
    FieldTable<LogConfig> t("log", "what the run logs besides metrics.jsonl",
                            {{"report_to", "zest writes TensorBoard files with tensorboard = true"},
                             {"logging_dir", "the files go to train.run_dir/tensorboard"}});
    t.boolean("tensorboard", &LogConfig::tensorboard, "TensorBoard event files in RUN_DIR/tensorboard (scalars, samples, config)")
        .reference("rank 0 writes TensorBoard event files into `<run_dir>/tensorboard/`: every metrics.jsonl record's "
                   "scalars, the validation pictures, the resolved config as text (see \"TensorBoard and step traces\" "
                   "below)");
    return t;
  }();
  return table;
}

LogConfig LogConfig::from_toml(ConfigTable& table) { return log_fields().read(table); }

void to_toml(const LogConfig& c, ConfigWriter& out) { log_fields().write(c, out); }

std::string tensorboard_dir(const std::string& run_dir) { return (fs::path(run_dir) / "tensorboard").string(); }

std::vector<std::string> prompt_tags(const std::vector<std::string>& prompts) {
  std::map<std::string, int> seen;
  std::vector<std::string> tags;
  for (const std::string& prompt : prompts) {
    const int n = ++seen[prompt];
    tags.push_back("samples/" + prompt + (n > 1 ? " (" + std::to_string(n) + ")" : ""));
  }
  return tags;
}

std::vector<std::pair<std::string, std::string>> picture_tags(
    const std::vector<std::string>& prompts, const std::vector<std::vector<std::string>>& pictures_by_prompt) {
  ZEST_CHECK(pictures_by_prompt.size() <= prompts.size(), "validation pictures of ", pictures_by_prompt.size(),
             " prompts for ", prompts.size(), " prompts");
  const std::vector<std::string> tags = prompt_tags(prompts);
  std::vector<std::pair<std::string, std::string>> tagged;
  for (size_t i = 0; i < pictures_by_prompt.size(); ++i) {
    const auto& pictures = pictures_by_prompt[i];
    for (size_t k = 0; k < pictures.size(); ++k)
      tagged.emplace_back(pictures.size() == 1 ? tags[i] : tags[i] + "/" + std::to_string(k + 1), pictures[k]);
  }
  return tagged;
}

std::pair<int, int> encoded_picture_size(const std::string& b) {
  static const std::string kPng("\x89PNG\r\n\x1a\n", 8);
  if (b.size() >= 24 && b.compare(0, 8, kPng) == 0)  // the IHDR chunk comes first: width, height
    return {static_cast<int>(big_endian_u32(b, 16)), static_cast<int>(big_endian_u32(b, 20))};
  if (b.size() >= 10 && (b.compare(0, 6, "GIF89a") == 0 || b.compare(0, 6, "GIF87a") == 0))
    return {static_cast<int>(little_endian_u16(b, 6)), static_cast<int>(little_endian_u16(b, 8))};
  ZEST_FAIL("tensorboard: a picture must be PNG or GIF");
}

TensorBoardLog::TensorBoardLog(bool is_active, const Setup& setup)
    : is_active_(is_active), world_size_(std::max(1, setup.world_size)) {
  if (!is_active_) return;
  std::string items = setup.items_name == "frames" ? "frames" : "latent_px";
  throughput_tag_ = "throughput/" + items + "_per_s_per_gpu";
  const fs::path dir = tensorboard_dir(setup.run_dir);
  std::error_code error;
  fs::create_directories(dir, error);
  if (error || !fs::is_directory(dir))
    throw Error("cannot create " + dir.string() + " for the TensorBoard files" + (error ? ": " + error.message() : "") +
                " (set [log] tensorboard = false to run without them)");
  char name[512];
  std::snprintf(name, sizeof(name), "%s%010lld.%s.%d.zest", kEventFilePrefix,
                static_cast<long long>(next_file_seconds(dir)), host_name_part().c_str(), static_cast<int>(::getpid()));
  path_ = (dir / name).string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) throw Error("cannot create " + path_ + ": " + std::strerror(errno));
  const double now = wall_seconds();
  append(file_version_event(now));
  // What a crashed run logged after the checkpoint this one resumes from is trained again: drop it.
  if (setup.start_step > 0) append(session_start_event(now, setup.start_step + 1));
  append(text_event(now, setup.start_step, "config", as_markdown_code(setup.config_toml)));
}

TensorBoardLog::~TensorBoardLog() {
  if (fd_ >= 0) ::close(fd_);  // only on an error path: finish() closes it and checks
}

void TensorBoardLog::append(const std::string& event) {
  if (fd_ < 0) return;
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  if (write_all(fd_, tfrecord_frame(event))) return;
  const std::string reason = std::strerror(errno);
  if (before >= 0 && ::ftruncate(fd_, before) != 0) {
    // Nothing more to do: the error below is what matters.
  }
  throw Error("cannot write " + path_ + ": " + reason + " (set [log] tensorboard = false to run without it)");
}

void TensorBoardLog::scalar(const std::string& tag, int64_t step, double value) {
  if (!is_active_ || !std::isfinite(value)) return;  // metrics.jsonl writes null there; TensorBoard draws no point
  append(scalar_event(wall_seconds(), step, tag, static_cast<float>(value)));
}

void TensorBoardLog::record(const StepRecord& r) {
  if (!is_active_) return;
  const double per_gpu = 1.0 / world_size_;
  scalar("train/loss", r.step, r.loss);
  scalar("train/lr", r.step, r.lr);
  scalar("train/grad_norm", r.step, r.grad_norm);
  scalar("train/loss_scale", r.step, r.loss_scale);
  scalar("train/skipped_steps", r.step, static_cast<double>(r.skipped_total));
  scalar("throughput/samples_per_s_per_gpu", r.step, r.samples_per_s * per_gpu);
  scalar(throughput_tag_, r.step, r.items_per_s * per_gpu);
  scalar("time/step_ms", r.step, r.step_ms);
  scalar("time/data_wait_ms", r.step, r.data_wait_ms);
  if (r.saved) scalar("time/checkpoint_stall_ms", r.step, r.checkpoint_stall_ms);
  if (r.gpu_peak_allocated_bytes >= 0) {
    scalar("memory/gpu_peak_allocated_gib", r.step, static_cast<double>(r.gpu_peak_allocated_bytes) / kBytesPerGiB);
    scalar("memory/gpu_peak_reserved_gib", r.step, static_cast<double>(r.gpu_peak_reserved_bytes) / kBytesPerGiB);
  }
  scalar("memory/host_rss_gib", r.step, static_cast<double>(r.host_rss_bytes) / kBytesPerGiB);
  scalar("memory/host_peak_rss_gib", r.step, static_cast<double>(r.host_peak_rss_bytes) / kBytesPerGiB);
}

void TensorBoardLog::picture(const std::string& tag, int64_t step, const std::string& encoded) {
  if (!is_active_) return;
  const auto [width, height] = encoded_picture_size(encoded);
  append(image_event(wall_seconds(), step, tag, encoded, width, height));
}

void TensorBoardLog::pictures(int64_t step, const std::vector<std::pair<std::string, std::string>>& tags_and_files) {
  if (!is_active_) return;
  for (const auto& [tag, file] : tags_and_files) picture(tag, step, read_whole_file(file));
}

void TensorBoardLog::animation(const std::string& tag, int64_t step, const GifAnimation& gif) {
  if (is_active_) picture(tag, step, encode_gif(gif));
}

void TensorBoardLog::finish() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw Error("cannot write " + path_ + ": " + std::strerror(errno));
}

}  // namespace zest
