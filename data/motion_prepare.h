// `zest data prepare motions`: a folder of captioned motion clips (.npy [frames, features], 30 fps, with a
// metadata.jsonl or name.txt captions) and a HY-Motion release → a zest.motion.v1 dataset whose text features
// are HY-Motion's own (Qwen3-8B's cropped last hidden state and CLIP-L's pooled output, models/hy_text), with
// its normalisation statistics (docs/data_formats.md).
#pragma once

#include "data/dataset_manifest.h"
#include "data/image_folder.h"

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace zest {

class Communicator;  // comm/communicator.h

struct PrepareMotionsOptions {
  std::string pretrained;     // HY-Motion release folder (config.yml + latest.ckpt): the widths
  std::string text_encoders;  // folder holding Qwen3-8B/ and clip-vit-large-patch14/ ("": the release's layout)
  std::string motions;        // folder of .npy clips with captions
  std::string out;            // dataset folder to create (must not hold anything yet)
  std::string caption_column = "text";
  int64_t text_tokens = 128;  // Qwen3 tokens kept after the system prompt (the release's max_length_llm)
  int64_t max_frames = 1800;  // longer clips are skipped (60 s at 30 fps)
  int64_t batch_size = 8;     // captions encoded together
  int64_t piece_clips = 256;  // clips per resumable piece of work
  int64_t shard_samples = 1024;
  std::string device;         // "" = this rank's GPU when there is one, else the CPU
};

struct PrepareMotionsReport {
  int64_t samples = 0;
  std::vector<SkippedFile> skipped;
  int64_t pieces_total = 0;
  int64_t pieces_reused = 0;
  std::string captions_from;
  DatasetManifest manifest;
};

// Encodes this rank's pieces (piece p of the sorted listing goes to rank p mod world), keeping each finished
// piece in OUT.partial/ so that a stopped run continues where it stopped (given the same options), then rank 0
// writes the dataset into OUT.partial/dataset/ and renames it to OUT: OUT appears complete or not at all.
// Clips that cannot be used (wrong width, NaN, empty, too long, unreadable) are skipped and listed with the
// reason in OUT/skipped.txt. Progress lines (clips/s) go to `log`.
PrepareMotionsReport prepare_motions(const PrepareMotionsOptions& options, Communicator& comm, std::ostream& log);

}  // namespace zest
