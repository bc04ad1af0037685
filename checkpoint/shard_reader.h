// ShardReader: element ranges of a checkpoint's units, read from whichever rank files hold them
// (rank r's file holds [r·S, (r+1)·S) of every unit). Files are opened on first use (their header is
// checked against the manifest then) and only the needed byte ranges are read, so resharding and
// merging never load a whole shard. Optionally every file is checksummed while it is read: each byte is
// hashed once, in file order, as reads pass it; finish_verification() hashes what no read touched.
#pragma once

#include "checkpoint/checksum.h"
#include "checkpoint/manifest.h"
#include "formats/safetensors.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zest::checkpoint {

class ShardReader {
 public:
  ShardReader(std::string step_dir, const Manifest& manifest, bool verify_checksums = false);
  ~ShardReader();

  // Elements [begin, begin + numel) of unit `unit_idx`'s flat buffer of `kind` into dst (fp32).
  void read(const std::string& kind, size_t unit_idx, int64_t begin, int64_t numel, float* dst);
  // With verify_checksums: hashes the rest of every rank file (opening those never read) and throws
  // zest::Error naming every file whose checksum differs from the manifest's.
  void finish_verification();
  // Ranks whose file has been opened (tests check that a rank reads only what it needs).
  std::vector<int> opened_ranks() const;

 private:
  struct OpenFile {
    explicit OpenFile(const std::string& path) : reader(path) {}
    safetensors::Reader reader;
    Xxh64Stream hash;
    uint64_t hashed_to = 0;  // bytes [0, hashed_to) of the file are in `hash`
  };
  OpenFile& file(int rank);
  void read_file_range(OpenFile& file, uint64_t offset, uint64_t nbytes, char* dst);
  void hash_up_to(OpenFile& file, uint64_t end);

  std::string dir_;
  const Manifest& manifest_;
  bool verify_ = false;
  std::map<int, std::unique_ptr<OpenFile>> files_;
  std::vector<char> scratch_;  // bytes read only to be hashed (headers, padding, optimizer state)
};

}  // namespace zest::checkpoint
