// MergedWriter: the consolidated model file(s) written tensor by tensor in pieces — one safetensors
// file, or several of at most shard_size bytes plus a hub-style index (NAME.index.json with
// "weight_map"). Files are written under .tmp names and renamed when all are complete; every target is
// checked first (output_path.h), so nothing is ever renamed over a folder, device, FIFO or link.
#pragma once

#include "formats/safetensors.h"

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zest::checkpoint {

struct MergedTensor {
  std::string name;
  std::vector<int64_t> shape;
};

class MergedWriter {
 public:
  // out_path: "DIR/model.safetensors". shard_size_bytes = 0: one file. Otherwise tensors are packed in
  // order into files DIR/model-0000i-of-0000K.safetensors (a tensor larger than the limit gets a file of
  // its own) with DIR/model.safetensors.index.json; when everything fits in one file it is out_path.
  MergedWriter(std::string out_path, std::vector<MergedTensor> tensors, torch::Dtype dtype,
               uint64_t shard_size_bytes, safetensors::Metadata metadata);
  ~MergedWriter();  // an unfinished merge removes its .tmp files
  MergedWriter(const MergedWriter&) = delete;
  MergedWriter& operator=(const MergedWriter&) = delete;

  // Data of the current tensor (in declaration order); pieces never span two tensors.
  void append(const torch::Tensor& piece);
  // Renames every file into place and writes the index. Returns the final file paths.
  std::vector<std::string> finish();

  const std::string& index_path() const { return index_path_; }  // "" for a single file
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  struct File {
    std::string path;
    size_t first = 0, end = 0;  // tensors [first, end)
  };
  void open_file(size_t file_idx);
  void skip_empty_tensors();
  void rename_into_place(const std::string& path);  // path.tmp → path
  void remove_partial_files();                      // every .tmp this writer created

  std::vector<MergedTensor> tensors_;
  torch::Dtype dtype_;
  safetensors::Metadata metadata_;
  std::vector<File> files_;
  std::string index_path_;
  uint64_t total_bytes_ = 0;
  size_t tensor_ = 0;          // current tensor
  int64_t written_numel_ = 0;  // of the current tensor
  size_t file_ = 0;            // current file
  std::unique_ptr<safetensors::Writer> writer_;
  bool finished_ = false;
};

}  // namespace zest::checkpoint
