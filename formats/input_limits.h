// The limits on every file zest reads from a stranger, in one place: each reader in formats/ checks its
// input against these before allocating or recursing, so a hostile file gets one message naming the file
// and the limit instead of exhausting the stack or the memory. Each bound lies far above what any real
// file needs (the comment says how far). Architecture limits of a model configuration live with its family
// (models/*/..._config.cpp), and a model's total size is checked against the machine (models/model_memory.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace zest {

// JSON (config.json, model_index.json, index files, dataset.json, manifests): nesting depth, checked
// while parsing (every configuration zest reads nests at most a few levels).
inline constexpr int kMaxJsonDepth = 64;

// Size caps of JSON and text files by kind (formats/json_text.h's read_json_file, core/untrusted_file.h's
// read_text_file): a model or scheduler config.json, model_index.json or tokenizer_config.json is a few
// KB; CLIP's vocab.json ~1 MB and merges.txt ~0.5 MB, a tokenizer.json 2-11 MB (each cap lies above the largest
// released file of its kind); a checkpoint manifest lists a few thousand tensors per rank (~1 MB per 1000); a
// `latest` file holds one folder name.
inline constexpr uint64_t kMaxConfigJsonBytes = uint64_t{4} << 20;
inline constexpr uint64_t kMaxVocabBytes = uint64_t{16} << 20;
inline constexpr uint64_t kMaxMergesBytes = uint64_t{16} << 20;
inline constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;
inline constexpr uint64_t kMaxLatestBytes = 4096;

// safetensors: the header's length (the reference implementation's bound; real headers are a few MB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// The YAML subset (HY-Motion config.yml): blocks and flow collections nested together (the release nests 3).
inline constexpr int kMaxYamlDepth = 64;

// torch.save archives: the pickle program (data.pkl) of a state dict is names and tensor descriptions, a few
// MB for the largest models; its values (~250 bytes each, ~25 per tensor); a tensor's dimensions; calls that
// unwrap another call (_rebuild_from_type_v2) nested (a program whose arguments refer to themselves is refused).
inline constexpr size_t kMaxPickleProgramBytes = size_t{256} << 20;
inline constexpr size_t kMaxPickleValues = size_t{1} << 20;
inline constexpr size_t kMaxTensorDims = 64;
inline constexpr int kMaxPickleCallDepth = 8;

// Zip (the torch.save container): directory entries (one per storage: tens of thousands at most). A record
// may also state at most the archive's own size (formats/zip_directory.h).
inline constexpr uint64_t kMaxZipRecords = uint64_t{1} << 20;

// (Text files read whole are limited by core/untrusted_file.h's read_text_file: 64 MiB by default.)

}  // namespace zest
