// Helpers of the untrusted-input tests: files written raw, hand-made pickle programs packed into
// torch.save zip archives, a small motion dataset, and "victim" files outside a scratch folder whose
// bytes and times must never change.
#pragma once

#include "common/read_text.h"
#include "common/temp_dir.h"
#include "core/check.h"

#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace zest::testing {

inline void write_text(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// The message of the zest::Error `fn` throws ("" and a test failure when it throws none or another type).
inline std::string zest_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a zest::Error: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

inline void expect_zest_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  const std::string message = zest_error_of(fn);
  for (const std::string& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << "message lacks '" << part << "': " << message;
}

// A torch.save-style zip holding `program` as archive/data.pkl and the given records (data/<key>).
inline void write_archive(const std::string& path, const std::string& program,
                          const std::map<std::string, std::string>& records = {}) {
  std::ofstream out(path, std::ios::binary);
  caffe2::serialize::PyTorchStreamWriter zip([&](const void* data, size_t size) {
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    return size;
  });
  zip.writeRecord("data.pkl", program.data(), program.size());
  for (const auto& [key, bytes] : records) zip.writeRecord("data/" + key, bytes.data(), bytes.size());
  zip.writeRecord("byteorder", "little", 6);
  zip.writeEndOfFile();
}

// Pickle program pieces (protocol 2), for hand-made archives.
inline std::string pickle_le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}
inline std::string pickle_str(const std::string& s) { return "X" + pickle_le(s.size(), 4) + s; }
inline std::string pickle_int(int64_t v) { return "\x8a\x08" + pickle_le(static_cast<uint64_t>(v), 8); }
inline std::string pickle_ints(const std::vector<int64_t>& values) {
  std::string out = "(";
  for (const int64_t v : values) out += pickle_int(v);
  return out + "t";
}

// {"model_state_dict": {name: _rebuild_tensor_v2(storage(key, numel), offset, size, stride)}} over float32.
inline std::string state_dict_program(const std::string& name, int64_t storage_numel, int64_t offset,
                                      const std::vector<int64_t>& size, const std::vector<int64_t>& stride) {
  std::string p = "\x80\x02}";
  p += pickle_str("model_state_dict") + "}" + pickle_str(name);
  p += "ctorch._utils\n_rebuild_tensor_v2\n(";
  p += "(" + pickle_str("storage") + "ctorch\nFloatStorage\n" + pickle_str("0") + pickle_str("cpu") +
       pickle_int(storage_numel) + "tQ";
  p += pickle_int(offset) + pickle_ints(size) + pickle_ints(stride) + "\x89" + "tR";
  p += "ss.";
  return p;
}

// Files outside the scratch folder that no command may touch: bytes and modification time.
class Victims {
 public:
  explicit Victims(const std::string& folder) : folder_(folder) {
    for (const char* name : {"v1.txt", "v2.txt", "v3.safetensors"}) {
      const std::string path = (std::filesystem::path(folder) / name).string();
      write_text(path, std::string("victim ") + name + "\n");
      paths_.push_back(path);
    }
    snapshot_ = snapshot();
  }
  const std::string& path(size_t i) const { return paths_.at(i); }
  const std::string& folder() const { return folder_; }
  // "" when every victim and the folder listing are as they were; else what changed.
  std::string changed() const {
    const auto now = snapshot();
    if (now == snapshot_) return "";
    for (const auto& [name, state] : snapshot_)
      if (!now.count(name) || now.at(name) != state) return "victim changed or removed: " + name;
    return "a file appeared outside the scratch folder in " + folder_;
  }

 private:
  std::map<std::string, std::string> snapshot() const {
    std::map<std::string, std::string> out;
    for (const auto& entry : std::filesystem::directory_iterator(folder_)) {
      struct stat st {};
      ::lstat(entry.path().c_str(), &st);
      out[entry.path().string()] = read_text(entry.path().string()) + "@" + std::to_string(st.st_mtim.tv_sec) +
                                   "." + std::to_string(st.st_mtim.tv_nsec);
    }
    return out;
  }
  std::string folder_;
  std::vector<std::string> paths_;
  std::map<std::string, std::string> snapshot_;
};

}  // namespace zest::testing
