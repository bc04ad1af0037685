// The resumable work that every `zest data prepare` command (images, motions) shares: OUT.partial/ with the
// job's description and its finished pieces, the pieces dealt to the ranks (piece p to rank p mod world), and
// the dataset staged in OUT.partial/dataset/ and renamed to OUT, so that OUT appears complete or not at all.
#pragma once

#include "data/image_folder.h"
#include "formats/json_field.h"

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

namespace zest {

namespace safetensors {
class Reader;
}

class Communicator;  // comm/communicator.h

// Where the unfinished work of a prepare into `out` is kept.
std::string prepare_work_folder(const std::string& out);

// `out` must be new or an empty folder: a dataset is written whole, never over another.
void check_new_dataset_folder(const std::string& out);

// The device named, else this rank's GPU when there is one, else the CPU.
torch::Device prepare_device(const std::string& requested, int local_rank);

// The xxh64 (hex) of the listing's file names and captions, as a job description records it.
std::string listing_digest(const ImageFolderListing& listing);

// The file of finished piece `piece` in the work folder.
std::string prepare_piece_path(const std::filesystem::path& work, int64_t piece);

struct PieceCount {
  int64_t total = 0;
  int64_t reused = 0;  // finished by an earlier, stopped run
};

// One prepare's work folder from its start to the published dataset. `job` describes the options and the
// listing (a rerun resumes only with the same one); `items_noun` ("images", "clips") is what progress lines
// count and `listing_noun` ("image listing") what a mismatched job names.
class PrepareWork {
 public:
  // Rank 0 records the job or checks it against the unfinished run's, and removes pieces a kill cut off;
  // collective.
  PrepareWork(Communicator& comm, const std::string& out, const std::string& job, std::string items_noun,
              const std::string& listing_noun);

  const std::filesystem::path& folder() const { return work_; }
  std::string piece_path(int64_t piece) const { return prepare_piece_path(work_, piece); }

  // This rank's pieces of `total` items, `per_piece` each, the finished ones reused: `write_piece(first, last,
  // path)` writes items [first, last) as the piece at `path` (safetensors::save_file: whole or absent). One
  // progress line per piece written. Collective: returns when every rank's pieces are finished.
  PieceCount write_pieces(int64_t total, int64_t per_piece, std::ostream& log,
                          const std::function<void(int64_t first, int64_t last, const std::string& path)>& write_piece);

  // Before each item of a piece: ends the run on a stop signal, saying that the finished pieces are kept.
  void throw_if_interrupted_preparing(const std::string& item) const;

  // Rank 0: `write_dataset(staging)` writes the dataset into the empty staging folder, which then becomes
  // `out` (replacing the empty folder a user made) and the work folder goes. Collective.
  void publish(const std::function<void(const std::filesystem::path& staging)>& write_dataset);

  // No item could be used: the work folder goes (nothing to resume; a rerun starts afresh) and the error says
  // why the first skipped one was ("SOURCE: none of the N images could be used (FILE: REASON)").
  [[noreturn]] void fail_nothing_usable(const std::string& source, size_t listed, const std::string& noun,
                                        const std::vector<SkippedFile>& skipped) const;

 private:
  Communicator& comm_;
  std::string out_;
  std::filesystem::path work_;
  std::string items_noun_;
};

// The finished pieces read back on rank 0 to assemble the dataset. Each piece records in its metadata, besides
// its tensors "NAME.K", "items" (one object per sample K) and "skipped" ({"file", "reason"} per file passed
// over), as the prepare commands wrote them. Errors name the piece and the field (formats/json_field.h).
class FinishedPieces {
 public:
  struct Sample {
    int64_t piece = 0;
    int64_t key = 0;  // K of the piece's tensors
    JsonField record;
  };

  FinishedPieces(const PrepareWork& work, int64_t pieces);
  ~FinishedPieces();

  // Every piece's samples, in piece order.
  const std::vector<Sample>& samples() const { return samples_; }
  // The files every piece passed over.
  const std::vector<SkippedFile>& skipped() const { return skipped_; }
  // Tensor "NAME.KEY" of piece `piece` (each piece's file is opened once, when its records are read).
  torch::Tensor read(int64_t piece, int64_t key, const std::string& name) const;

 private:
  std::vector<std::unique_ptr<safetensors::Reader>> pieces_;  // by piece index
  std::vector<std::unique_ptr<JsonDocument>> documents_;     // the records the samples' fields point into
  std::vector<Sample> samples_;
  std::vector<SkippedFile> skipped_;
};

// skipped.txt of a staged dataset: a line per file passed over, "FILE<TAB>REASON".
void write_skipped_list(const std::filesystem::path& staging, const std::vector<SkippedFile>& skipped);

}  // namespace zest
