// torch.save files (the zip format of PyTorch >= 1.6, e.g. HY-Motion's latest.ckpt): reading the
// tensors of one state dict lazily, one storage record at a time, and writing {key: {name: tensor}}
// tensor by tensor, so neither side ever holds the whole model in memory.
#pragma once

#include "formats/pickle_reader.h"
#include "formats/zip_directory.h"

#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace caffe2::serialize {
class PyTorchStreamReader;
class PyTorchStreamWriter;
}  // namespace caffe2::serialize

namespace zest {

struct ArchiveTensor {
  std::string name;  // its key in the state dict
  PickledTensor tensor;
};

class TorchArchiveReader {
 public:
  // Opens the zip and runs its data.pkl; errors name the file (not a zip, a legacy torch.save, ...).
  explicit TorchArchiveReader(std::string path);
  ~TorchArchiveReader();
  TorchArchiveReader(const TorchArchiveReader&) = delete;
  TorchArchiveReader& operator=(const TorchArchiveReader&) = delete;

  const std::string& path() const { return path_; }
  // String keys of the top-level dict, in file order.
  std::vector<std::string> top_level_keys() const;
  // The tensors of the dict stored under the top-level `key` (a state dict), in file order; values that
  // are not tensors are left out. Errors when the key is absent or not a dict, listing the keys present.
  std::vector<ArchiveTensor> state_dict(const std::string& key) const;
  // The tensor's values as a CPU tensor of its stored dtype, shape and strides (reads one storage).
  torch::Tensor read(const ArchiveTensor& tensor) const;

 private:
  std::string path_;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip_;
  ZipDirectory directory_;  // the records' stated sizes, checked before each read
  PickleRef root_;
};

class TorchArchiveWriter {
 public:
  // Writes to `path`.tmp; finish() renames it over `path`. An unfinished writer removes the .tmp file.
  explicit TorchArchiveWriter(std::string path);
  ~TorchArchiveWriter();
  TorchArchiveWriter(const TorchArchiveWriter&) = delete;
  TorchArchiveWriter& operator=(const TorchArchiveWriter&) = delete;

  // Writes the tensor's data (contiguous, its own dtype) at once; `name` is its state-dict key.
  void add(const std::string& name, const torch::Tensor& tensor);
  // Writes data.pkl = {key: {name: tensor, ...}} (tensors in add() order), closes, fsyncs and renames.
  void finish(const std::string& key);

 private:
  struct Entry {
    std::string name;
    std::string storage_key;
    torch::Dtype dtype;
    std::vector<int64_t> shape;
  };
  template <typename Fn>
  void zip_call(const std::string& what, Fn&& fn);  // c10::Error → zest::Error naming the file

  std::string path_;
  std::FILE* file_ = nullptr;
  std::unique_ptr<caffe2::serialize::PyTorchStreamWriter> zip_;
  std::vector<Entry> entries_;
  bool finished_ = false;
  bool discard_ = false;
};

}  // namespace zest
