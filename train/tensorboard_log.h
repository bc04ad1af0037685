// The run's TensorBoard log ([log] tensorboard, on by default): rank 0 writes RUN_DIR/tensorboard/
// events.out.tfevents.* — the scalars of every metrics.jsonl record under stable tags, the validation
// pictures under their prompts, and the resolved run file as text. One new file per start (a resumed run
// adds a file, as TensorBoard expects, and continues the curves). Every record is written at once
// (a crash loses no logged step) and checked: a failed write is an error naming the file, cut off again.
// The tags are listed in docs/config_reference.md ("TensorBoard").
#pragma once

#include "train/progress.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zest {

class ConfigTable;
class ConfigWriter;
struct GifAnimation;

// The [log] table.
struct LogConfig {
  bool tensorboard = true;  // write RUN_DIR/tensorboard/ (rank 0)

  static LogConfig from_toml(ConfigTable& table);
};

void to_toml(const LogConfig& config, ConfigWriter& out);
template <typename C>
class FieldTable;
const FieldTable<LogConfig>& log_fields();  // the [log] table (core/field_table.h)

// RUN_DIR/tensorboard: the event files, and the step traces beside them (profiling/step_trace.h), so that one
// TensorBoard run shows both.
std::string tensorboard_dir(const std::string& run_dir);

class TensorBoardLog {
 public:
  struct Setup {
    std::string run_dir;
    int world_size = 1;
    std::string items_name;   // "frames" or "latent px": names the per-GPU throughput tag
    int64_t start_step = 0;   // the step the run starts from (> 0: resumed)
    std::string config_toml;  // the resolved run file (`zest config check`), logged as text
  };

  // is_active: rank 0 with [log] tensorboard. Creates the folder and a new event file, writes the file
  // version, on a resume the session start that drops what a crashed run logged after its checkpoint, and
  // the config text (at step 0, or at the step a resumed run starts from).
  TensorBoardLog(bool is_active, const Setup& setup);
  ~TensorBoardLog();
  TensorBoardLog(const TensorBoardLog&) = delete;
  TensorBoardLog& operator=(const TensorBoardLog&) = delete;

  void record(const StepRecord& r);  // the scalars of one metrics.jsonl record, at r.step
  void scalar(const std::string& tag, int64_t step, double value);
  // Encoded pictures (PNG or GIF files as written under RUN_DIR): each under its tag, at `step`.
  void pictures(int64_t step, const std::vector<std::pair<std::string, std::string>>& tags_and_files);
  void picture(const std::string& tag, int64_t step, const std::string& encoded);
  // A HY-Motion skeleton animation (pipelines/motion_gif.h) as an animated GIF picture.
  void animation(const std::string& tag, int64_t step, const GifAnimation& gif);
  void finish();  // closes the file (checked)

  const std::string& path() const { return path_; }

 private:
  void append(const std::string& event);

  bool is_active_;
  int world_size_ = 1;
  std::string throughput_tag_;
  std::string path_;
  int fd_ = -1;
};

// The validation-picture tag of each prompt: "samples/<prompt>", with " (2)", " (3)" ... after repeats.
std::vector<std::string> prompt_tags(const std::vector<std::string>& prompts);

// Each prompt's pictures under its tag, as (tag, file): a prompt's one picture under the prompt's tag, several
// (HY-Motion's num_images skeleton GIFs) under "<tag>/1", "<tag>/2", ..., so that no picture lands under
// another prompt's tag. `pictures_by_prompt` is in prompt order; a prompt may have none.
std::vector<std::pair<std::string, std::string>> picture_tags(
    const std::vector<std::string>& prompts, const std::vector<std::vector<std::string>>& pictures_by_prompt);

// Width and height of an encoded PNG or GIF (from its header); an error for anything else.
std::pair<int, int> encoded_picture_size(const std::string& encoded);

}  // namespace zest
