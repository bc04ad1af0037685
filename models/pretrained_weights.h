// The tensors a pretrained source holds, under the model's state-dict names, each read on request: one
// safetensors file, hub-style shards with their index, or what a family's folder format opens (a
// HY-Motion release's latest.ckpt). Nothing is read before it is asked for.
#pragma once

#include "models/pretrained_source.h"

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace zest {

struct SourceTensor {
  std::string name;         // the model's state-dict name (a release's prefix removed)
  std::string stored_name;  // the name in the file
  std::vector<int64_t> shape;
  torch::Dtype dtype = torch::kFloat32;
  size_t file = 0;          // which file of the source holds it
};

class PretrainedWeights {
 public:
  virtual ~PretrainedWeights() = default;
  // Opens the weights of `layout` and lists their tensors (headers only): its folder format's own reader,
  // else safetensors (+ index).
  static std::unique_ptr<PretrainedWeights> open(const PretrainedLayout& layout);

  const std::string& path() const { return path_; }  // named in messages
  const std::vector<SourceTensor>& tensors() const { return tensors_; }
  // Tensors of the format that are not the network's (a release's pipeline tensors): neither loaded
  // nor counted as unexpected.
  const std::vector<std::string>& passed_over() const { return passed_over_; }
  // The tensor's values as stored (CPU, its own dtype and shape).
  virtual torch::Tensor read(const SourceTensor& tensor) const = 0;

 protected:
  explicit PretrainedWeights(std::string path) : path_(std::move(path)) {}
  std::string path_;
  std::vector<SourceTensor> tensors_;
  std::vector<std::string> passed_over_;
};

}  // namespace zest
