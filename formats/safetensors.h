// safetensors reading and writing (the format of checkpoints shards, merged models and golden files):
// header parsing with validation, whole-tensor and byte-range reads, and a streaming writer that
// never needs the whole file in memory.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zest::safetensors {

// One tensor entry of a safetensors header. Offsets are relative to the start of the data section.
struct TensorInfo {
  std::string name;
  torch::Dtype dtype = torch::kFloat32;
  std::vector<int64_t> shape;
  uint64_t data_begin = 0;
  uint64_t data_end = 0;
  int64_t numel() const;
  uint64_t nbytes() const { return data_end - data_begin; }
};

// Name used in safetensors headers ("F32", "BF16", ...) and back; errors name the unsupported dtype.
std::string dtype_name(torch::Dtype dtype);
torch::Dtype dtype_from_name(const std::string& name, const std::string& context);
size_t dtype_size(torch::Dtype dtype);

using Metadata = std::map<std::string, std::string>;

// Opens and validates a file (header length, JSON, dtypes, shapes vs byte sizes, overlapping or
// out-of-range offsets, file size). Every error names the file and the offending tensor.
class Reader {
 public:
  explicit Reader(std::string path);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in file (offset) order
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // throws naming the file if absent
  const Metadata& metadata() const { return metadata_; }

  // The whole tensor as a new contiguous CPU tensor of its stored dtype and shape.
  torch::Tensor read(const std::string& name) const;
  // Elements [elem_offset, elem_offset + numel) of the flattened tensor, as a 1-D CPU tensor.
  torch::Tensor read_flat_range(const std::string& name, int64_t elem_offset, int64_t numel) const;
  // Raw bytes [byte_offset, byte_offset + nbytes) of the tensor's data into dst.
  void read_bytes(const std::string& name, uint64_t byte_offset, uint64_t nbytes, void* dst) const;

  // The file as bytes: its size, where tensor data starts (8 + header length), and any byte range of it
  // (checksums over the whole file read through these).
  uint64_t file_bytes() const { return file_bytes_; }
  uint64_t data_start() const { return data_start_; }
  void read_file_range(uint64_t offset, uint64_t nbytes, void* dst) const;

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t data_start_ = 0;  // 8 + header length
  uint64_t file_bytes_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  Metadata metadata_;
};

// Declared entry for the streaming writer.
struct TensorDecl {
  std::string name;
  torch::Dtype dtype = torch::kFloat32;
  std::vector<int64_t> shape;
};

// Streaming writer: the header (all names, dtypes and shapes) is written first, then the data of each
// tensor in declaration order, in as many append() pieces as the caller likes. finish() checks that
// every byte was written, flushes and fsyncs. Writes go to `path` directly: callers that need
// atomicity write to a temporary name and rename (see save_file).
class Writer {
 public:
  Writer(std::string path, std::vector<TensorDecl> decls, const Metadata& metadata = {});
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Appends data of the current tensor (converted to its declared dtype, made contiguous).
  void append(const torch::Tensor& piece);
  // Convenience: appends a whole tensor, checking its numel matches the next declaration.
  void write(const std::string& name, const torch::Tensor& tensor);
  void finish();
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<TensorDecl> decls_;
  std::vector<uint64_t> sizes_;
  size_t current_ = 0;
  uint64_t written_in_current_ = 0;
  uint64_t bytes_written_ = 0;
  bool finished_ = false;
};

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Whole-file helpers. save_file writes to PATH.tmp, fsyncs and renames over PATH, so an existing file is
// either kept whole or replaced whole.
void save_file(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {});
NamedTensors load_file(const std::string& path);

// fsync a directory (after a rename inside it).
void fsync_dir(const std::string& dir);

}  // namespace zest::safetensors
