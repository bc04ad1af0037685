// Consolidated (optionally sharded) safetensors output (see merged_writer.h).
#include "checkpoint/merged_writer.h"

#include "checkpoint/directory.h"
#include "checkpoint/output_path.h"
#include "core/check.h"
#include "core/interrupt.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace zest::checkpoint {
namespace fs = std::filesystem;

namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

std::string shard_file_name(const std::string& stem, size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof(name), "-%05zu-of-%05zu.safetensors", index + 1, count);
  return stem + name;
}

}  // namespace

MergedWriter::MergedWriter(std::string out_path, std::vector<MergedTensor> tensors, torch::Dtype dtype,
                           uint64_t shard_size_bytes, safetensors::Metadata metadata)
    : tensors_(std::move(tensors)), dtype_(dtype), metadata_(std::move(metadata)) {
  const uint64_t elem_bytes = safetensors::dtype_size(dtype_);
  // Greedy packing in order; the last file grows until the next tensor would pass the limit.
  std::vector<File> files;
  uint64_t file_bytes = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const uint64_t bytes = static_cast<uint64_t>(numel_of(tensors_[i].shape)) * elem_bytes;
    total_bytes_ += bytes;
    const bool start_new = files.empty() || (shard_size_bytes > 0 && file_bytes > 0 &&
                                             file_bytes + bytes > shard_size_bytes);
    if (start_new) {
      files.push_back({"", i, i});
      file_bytes = 0;
    }
    files.back().end = i + 1;
    file_bytes += bytes;
  }
  if (files.empty()) files.push_back({"", 0, 0});
  const fs::path out(out_path);
  if (files.size() == 1) {
    files[0].path = out.string();
  } else {
    const std::string stem = (out.parent_path() / out.stem()).string();  // model.safetensors → model
    for (size_t f = 0; f < files.size(); ++f) files[f].path = shard_file_name(stem, f, files.size());
    index_path_ = out.string() + ".index.json";
  }
  files_ = std::move(files);
  // Nothing is created before every name the merge will write or rename over has been checked.
  for (const File& f : files_) {
    check_output_target(f.path);
    check_output_target(f.path + ".tmp");
  }
  if (!index_path_.empty()) {
    check_output_target(index_path_);
    check_output_target(index_path_ + ".tmp");
  }
  create_output_folder(out.string());
  try {  // the destructor does not run for a throwing constructor
    open_file(0);
    skip_empty_tensors();
  } catch (...) {
    remove_partial_files();
    throw;
  }
}

MergedWriter::~MergedWriter() {
  if (!finished_) remove_partial_files();
}

void MergedWriter::remove_partial_files() {
  writer_.reset();  // an unfinished safetensors::Writer removes its own file
  // Files [0, file_] were created under .tmp names; a failed finish() may have renamed some already.
  for (size_t f = 0; f <= file_ && f < files_.size(); ++f) std::remove((files_[f].path + ".tmp").c_str());
  if (!index_path_.empty()) std::remove((index_path_ + ".tmp").c_str());
}

void MergedWriter::rename_into_place(const std::string& path) {
  check_output_target(path);  // again: never rename over what is not a regular file
  const std::string tmp = path + ".tmp";
  ZEST_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp, " to ", path, ": ",
             std::strerror(errno));
}

void MergedWriter::open_file(size_t file_idx) {
  file_ = file_idx;
  std::vector<safetensors::TensorDecl> decls;
  for (size_t i = files_[file_idx].first; i < files_[file_idx].end; ++i)
    decls.push_back({tensors_[i].name, dtype_, tensors_[i].shape});
  writer_ = std::make_unique<safetensors::Writer>(files_[file_idx].path + ".tmp", decls, metadata_);
}

// Moves past completed (or empty) tensors, finishing and opening files at their boundaries.
void MergedWriter::skip_empty_tensors() {
  while (true) {
    while (tensor_ < files_[file_].end && written_numel_ == numel_of(tensors_[tensor_].shape)) {
      ++tensor_;
      written_numel_ = 0;
    }
    if (tensor_ < files_[file_].end || file_ + 1 >= files_.size()) return;
    writer_->finish();
    open_file(file_ + 1);
  }
}

void MergedWriter::append(const torch::Tensor& piece) {
  // A stop signal (zest merge's InterruptGuard): the destructor of the unwinding writer removes the .tmp files.
  throw_if_interrupted("merging into " + files_.front().path);
  ZEST_CHECK(tensor_ < tensors_.size(), "merge: data appended after the last tensor");
  const MergedTensor& t = tensors_[tensor_];
  ZEST_CHECK(written_numel_ + piece.numel() <= numel_of(t.shape), "merge: tensor '", t.name, "' receives ",
             written_numel_ + piece.numel(), " elements, its shape has ", numel_of(t.shape));
  writer_->append(piece);
  written_numel_ += piece.numel();
  skip_empty_tensors();
}

std::vector<std::string> MergedWriter::finish() {
  throw_if_interrupted("merging into " + files_.front().path);  // the last moment before files are replaced
  ZEST_CHECK(tensor_ == tensors_.size(), "merge: finish() before tensor '",
             tensor_ < tensors_.size() ? tensors_[tensor_].name : "", "' was written");
  writer_->finish();
  writer_.reset();
  std::vector<std::string> paths;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (const File& f : files_) {
    rename_into_place(f.path);
    paths.push_back(f.path);
    for (size_t i = f.first; i < f.end; ++i) weight_map[tensors_[i].name] = fs::path(f.path).filename().string();
  }
  if (!index_path_.empty()) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes_}}}, {"weight_map", weight_map}};
    for (const auto& [key, value] : metadata_) index["metadata"][key] = value;
    write_file_synced(index_path_ + ".tmp", index.dump(2) + "\n");
    rename_into_place(index_path_);
  }
  const fs::path parent = fs::path(paths.front()).parent_path();
  safetensors::fsync_dir(parent.empty() ? "." : parent.string());
  finished_ = true;
  return paths;
}

}  // namespace zest::checkpoint
