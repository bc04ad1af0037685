// Seeded fuzz suite of every reader of a stranger's file: mutated safetensors headers, torch.save
// archives (the pickle program and the zip bytes), HY-Motion config.yml, dataset.json (read, trained
// from, overwritten by `data synth`, statistics rewritten) and safetensors index files. Each case must end
// in a correct result or one clear line (a zest::Error naming the file: no newline, no library text), must
// not crash or hang (a per-case alarm), must write nothing outside its scratch folder (victim files beside
// it keep their bytes and times), and the whole run keeps its peak memory under a bound. Reproducible:
// the seed is fixed; the counts per format and outcome are printed.
#include "inputs/inputs_test_util.h"

#include "formats/safetensors.h"
#include "core/untrusted_file.h"
#include "data/dataset.h"
#include "data/dataset_check.h"
#include "data/model_features.h"
#include "data/motion_stats.h"
#include "data/synth.h"
#include "formats/config_json.h"
#include "models/hymotion/released_format.h"
#include "formats/torch_archive.h"
#include "models/model_resolve.h"
#include "models/pretrained_source.h"
#include "models/pretrained_weights.h"

#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <iostream>
#include <random>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

constexpr unsigned kSeed = 20261201;
constexpr int kAlarmSeconds = 20;             // one case takes milliseconds
constexpr double kSuiteSeconds = 50.0;        // the whole suite, on a loaded 2-core machine
constexpr long kPeakRssKiB = 3L << 20;        // 3 GiB, far above what any case needs

// The case being run, for the alarm's message (async-signal-safe: a fixed buffer).
char g_case[256] = "";
extern "C" void on_alarm(int) {
  const char prefix[] = "\nfuzz case hung: ";
  [[maybe_unused]] auto a = ::write(2, prefix, sizeof(prefix) - 1);
  [[maybe_unused]] auto b = ::write(2, g_case, std::strlen(g_case));
  ::_exit(3);
}

struct Counts {
  int ok = 0, refused = 0;
};

class Fuzzer {
 public:
  explicit Fuzzer(const TempDir& root) : root_(root), victims_((fs::create_directories(root.sub("victims")), root.sub("victims"))) {
    std::signal(SIGALRM, on_alarm);
  }
  ~Fuzzer() { std::signal(SIGALRM, SIG_DFL); }

  std::mt19937& rng() { return rng_; }
  const Victims& victims() const { return victims_; }
  std::string scratch() const { return root_.sub("scratch"); }

  // A fresh scratch folder for one case.
  void fresh_scratch() {
    fs::remove_all(scratch());
    fs::create_directories(scratch());
  }

  // Runs one case: ok, or one clear zest::Error line; nothing outside the scratch folder changes.
  void run(const std::string& format, const std::string& description, const std::function<void()>& body) {
    std::snprintf(g_case, sizeof(g_case), "%s #%d: %s", format.c_str(), case_number_++, description.c_str());
    ::alarm(kAlarmSeconds);
    std::string error;
    bool refused = false;
    try {
      body();
    } catch (const Error& e) {
      refused = true;
      error = e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << g_case << ": not a zest::Error (" << typeid(e).name() << "): " << e.what();
    }
    ::alarm(0);
    if (refused && std::getenv("ZEST_FUZZ_VERBOSE") != nullptr) std::cout << g_case << "\n  -> " << error << "\n";
    if (refused) {
      EXPECT_FALSE(error.empty()) << g_case;
      EXPECT_EQ(error.find('\n'), std::string::npos) << g_case << ": a multi-line message: " << error;
      for (const char* internal : {"Exception raised from", "stoll", "stoull", "stod", "basic_string", "json.exception",
                                   "terminate", "\x1b"})
        EXPECT_EQ(error.find(internal), std::string::npos) << g_case << ": library text '" << internal << "': " << error;
    }
    const std::string changed = victims_.changed();
    EXPECT_EQ(changed, "") << g_case;
    for (const auto& entry : fs::directory_iterator(root_.path())) {
      const std::string name = entry.path().filename().string();
      EXPECT_TRUE(name == "scratch" || name == "victims" || name == "base") << g_case << ": wrote " << name;
    }
    (refused ? counts_[format].refused : counts_[format].ok)++;
  }

  void print_counts() const {
    int total = 0;
    for (const auto& [format, c] : counts_) {
      std::cout << "[fuzz] " << format << ": " << c.ok + c.refused << " cases, " << c.ok << " correct results, "
                << c.refused << " clear errors\n";
      total += c.ok + c.refused;
    }
    std::cout << "[fuzz] total: " << total << " cases (seed " << kSeed << ")\n";
  }
  const std::map<std::string, Counts>& counts() const { return counts_; }

 private:
  const TempDir& root_;
  Victims victims_;
  std::mt19937 rng_{kSeed};
  std::map<std::string, Counts> counts_;
  int case_number_ = 0;
};

size_t pick(std::mt19937& rng, size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }

// One byte-level mutation of `text`: flip, insert a token, delete or duplicate a range, truncate.
std::string mutate_text(std::string text, std::mt19937& rng, const std::vector<std::string>& tokens,
                        std::string& description) {
  const size_t kind = pick(rng, 6);
  const size_t at = text.empty() ? 0 : pick(rng, text.size());
  switch (kind) {
    case 0:
      if (!text.empty()) text[at] = static_cast<char>(pick(rng, 256));
      description = "byte " + std::to_string(at) + " changed";
      break;
    case 1:
    case 2: {
      const std::string& token = tokens[pick(rng, tokens.size())];
      text.insert(at, token);
      description = "inserted '" + token.substr(0, 24) + "' at " + std::to_string(at);
      break;
    }
    case 3:
      text.erase(at, 1 + pick(rng, 16));
      description = "bytes deleted at " + std::to_string(at);
      break;
    case 4:
      text.insert(at, text.substr(at, 1 + pick(rng, 32)));
      description = "bytes duplicated at " + std::to_string(at);
      break;
    default:
      text.resize(at);
      description = "truncated to " + std::to_string(at) + " bytes";
  }
  return text;
}

const std::vector<std::string> kJsonTokens = {
    "{", "}", "[", "]", ",", ":", "\"", "-1", "0", "1e309", "18446744073709551615", "9223372036854775808",
    "null", "true", "\"\\u001b[31m\"", "\"../x\"", "\"/etc/hostname\"", std::string(200, '['), "\"F64\"", "\"U8\"",
    "\"shape\": [1, 2]", "\"data_offsets\": [0, 99999999999]", "\"__metadata__\": {}", "\\", "\\u0000"};

// ---- safetensors headers ----

void fuzz_safetensors(Fuzzer& f, int cases) {
  const std::string base_path = f.scratch() + "-base.safetensors";
  fs::create_directories(fs::path(base_path).parent_path());
  safetensors::save_file(base_path, {{"a", torch::arange(6, torch::kFloat32).view({2, 3})},
                                     {"b", torch::ones({4}, torch::kBFloat16)},
                                     {"c", torch::arange(2, torch::kInt64)}},
                         {{"format", "pt"}});
  const std::string base = read_text(base_path);
  fs::remove(base_path);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, base.data(), 8);
  const std::string header = base.substr(8, header_bytes), data = base.substr(8 + header_bytes);
  for (int i = 0; i < cases; ++i) {
    f.fresh_scratch();
    std::string what;
    std::string file;
    if (i % 5 == 4) {  // the length field or the data
      file = base;
      const size_t at = pick(f.rng(), i % 2 ? 8 : file.size());
      file[at] = static_cast<char>(pick(f.rng(), 256));
      what = "file byte " + std::to_string(at) + " changed";
    } else {
      const std::string mutated = mutate_text(header, f.rng(), kJsonTokens, what);
      file = pickle_le(mutated.size(), 8) + mutated + data;
    }
    const std::string path = f.scratch() + "/m.safetensors";
    write_text(path, file);
    f.run("safetensors header", what, [&] {
      const safetensors::Reader reader(path);
      for (const safetensors::TensorInfo& t : reader.tensors()) reader.read(t.name);
    });
  }
}

// ---- torch.save archives ----

void fuzz_archives(Fuzzer& f, int cases) {
  fs::create_directories(f.scratch());
  const std::string base_path = f.scratch() + "/base.ckpt";
  {
    TorchArchiveWriter writer(base_path);
    writer.add("motion_transformer.w", torch::arange(12, torch::kFloat32).view({3, 4}));
    writer.add("motion_transformer.b", torch::ones({4}, torch::kFloat16));
    writer.add("mean", torch::zeros({2}, torch::kFloat64));
    writer.finish(hymotion::kReleaseStateDictKey);
  }
  const std::string zip = read_text(base_path);
  std::string program;
  std::map<std::string, std::string> records;
  {
    caffe2::serialize::PyTorchStreamReader reader(base_path);
    auto [pkl, size] = reader.getRecord("data.pkl");
    program.assign(static_cast<const char*>(pkl.get()), size);
    for (const char* key : {"0", "1", "2"}) {
      auto [bytes, n] = reader.getRecord(std::string("data/") + key);
      records[key].assign(static_cast<const char*>(bytes.get()), n);
    }
  }
  const std::vector<std::string> opcodes = {"(", "t", "]", "a", "e", "}", "s", "u", "R", "Q", ".", "0", "2",
                                            "h\x01", "q\x07", "\x8e\xff\xff\xff\xff\xff\xff\xff\xf7", "K\xff",
                                            "\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f", "I999999999999999999999\n",
                                            "ctorch._tensor\n_rebuild_from_type_v2\n", "p-1\n", "gx\n", "N", "\x81",
                                            "X\xff\xff\xff\x7f", std::string(64, ']')};
  for (int i = 0; i < cases; ++i) {
    f.fresh_scratch();
    const std::string path = f.scratch() + "/latest.ckpt";
    std::string what;
    if (i % 2 == 0) {
      write_archive(path, mutate_text(program, f.rng(), opcodes, what), records);
      what = "data.pkl: " + what;
    } else {
      std::string bytes = zip;
      for (int k = 0, n = 1 + static_cast<int>(pick(f.rng(), 4)); k < n; ++k) {
        const size_t at = pick(f.rng(), bytes.size());
        bytes[at] = static_cast<char>(pick(f.rng(), 256));
        what += (what.empty() ? "zip bytes changed at " : ", ") + std::to_string(at);
      }
      write_text(path, bytes);
    }
    f.run("torch.save archive", what, [&] {
      const TorchArchiveReader archive(path);
      for (const ArchiveTensor& t : archive.state_dict(hymotion::kReleaseStateDictKey)) archive.read(t);
    });
  }
}

// ---- HY-Motion config.yml ----

void fuzz_yaml(Fuzzer& f, int cases) {
  ModelSelection tiny;
  tiny.name = "hymotion_tiny";
  const std::string base = hymotion::release_config_yaml(toml_to_json(resolve_model(tiny).toml_text, "tiny"));
  const std::vector<std::string> tokens = {"[", "]", "{", "}", ": ", "- ", "'", "\"", "\n  ", "\n", "#", "&a ", "*a",
                                           "!!int ", "| ", "> ", "999999999", "1.0e999", "\t", "---\n", "...\n",
                                           "num_layers: 999999999\n  ", "feat_dim: 1000000\n  ", "~", "\\",
                                           std::string(300, '['), "? ", "%", "0x", "-.inf", ".nan"};
  for (int i = 0; i < cases; ++i) {
    f.fresh_scratch();
    std::string what;
    write_text(f.scratch() + "/config.yml", mutate_text(base, f.rng(), tokens, what));
    write_text(f.scratch() + "/latest.ckpt", "");
    f.run("config.yml", what, [&] { count_model_parameters(resolve_pretrained_folder(f.scratch())); });
  }
}

// ---- dataset.json ----

void fuzz_datasets(Fuzzer& f, const std::string& base_dir, int cases) {
  const std::string base = read_text(base_dir + "/dataset.json");
  const std::vector<std::string> names = {"../victims/v1.txt", f.victims().path(0), "./shard-00000.safetensors",
                                          "shard-00001.safetensors", "", ".", "sub/../shard-00001.safetensors",
                                          "fifo", "zero", "linkout", "stats.safetensors", "missing.safetensors",
                                          "\x1b]0;title\x07"};
  for (int i = 0; i < cases; ++i) {
    f.fresh_scratch();
    fs::copy(base_dir, f.scratch(), fs::copy_options::recursive);
    ::mkfifo((f.scratch() + "/fifo").c_str(), 0644);
    fs::create_symlink("/dev/zero", f.scratch() + "/zero");
    fs::create_symlink(f.victims().path(2), f.scratch() + "/linkout");
    std::string what;
    std::string text;
    if (i % 3 == 2) {
      text = mutate_text(base, f.rng(), kJsonTokens, what);
    } else {
      nlohmann::json doc = nlohmann::json::parse(base);
      const size_t shard = pick(f.rng(), doc["shards"].size());
      switch (pick(f.rng(), 5)) {
        case 0:
        case 1: {
          const std::string name = names[pick(f.rng(), names.size())];
          doc["shards"][shard]["file"] = name;
          what = "shards[" + std::to_string(shard) + "].file = " + printable(name);
          break;
        }
        case 2: {
          const std::string name = names[pick(f.rng(), names.size())];
          doc["stats"] = name;
          what = "stats = " + printable(name);
          break;
        }
        case 3: {
          const std::vector<nlohmann::json> counts = {0, -1, 1, 1e30, int64_t{1} << 40, "3", nullptr};
          doc["shards"][shard]["samples"] = counts[pick(f.rng(), counts.size())];
          what = "shards[" + std::to_string(shard) + "].samples = " + doc["shards"][shard]["samples"].dump();
          break;
        }
        default: {
          const std::vector<nlohmann::json> widths = {0, -1, int64_t{1} << 40, 7, "x", 1.5};
          const auto it = std::next(doc["features"].begin(), static_cast<long>(pick(f.rng(), doc["features"].size())));
          *it = widths[pick(f.rng(), widths.size())];
          what = "features." + it.key() + " = " + it->dump();
        }
      }
      text = doc.dump(1);
    }
    write_text(f.scratch() + "/dataset.json", text);
    const std::string dir = f.scratch();
    switch (i % 4) {
      case 0:
        f.run("dataset.json (open, read)", what, [&] {
          const auto dataset = open_dataset(dir, {}, nullptr);
          dataset->get(0, 1);
          dataset->get(dataset->size() - 1, 2);
        });
        break;
      case 1:
        f.run("dataset.json (data check)", what, [&] {
          const DatasetManifest m = read_manifest(dir);
          find_non_finite(dir, m);
          open_dataset(dir, {}, nullptr);
        });
        break;
      case 2:
        f.run("dataset.json (data stats)", what, [&] {
          DatasetManifest m = read_manifest(dir);
          if (m.stats_file.empty()) m.stats_file = "stats.safetensors";
          write_motion_stats(m.stats_path(dir, false), compute_motion_stats(dir, m));
        });
        break;
      default:
        f.run("dataset.json (synth --overwrite)", what, [&] {
          SynthOptions o;
          o.samples = 3;
          o.overwrite = true;
          synthesize_dataset(dir, builtin_model_features("hymotion_tiny"), o);
        });
    }
  }
}

// ---- safetensors index files ----

void fuzz_indexes(Fuzzer& f, int cases) {
  const std::vector<std::string> names = {"../victims/v3.safetensors", "/etc/hostname", "./part-1.safetensors",
                                          "part-2.safetensors", "fifo", "zero", "linkout", "", ".", "missing",
                                          "diffusion_pytorch_model.safetensors.index.json"};
  const nlohmann::json base = {{"metadata", {{"total_size", 40}}},
                               {"weight_map", {{"w1", "part-1.safetensors"}, {"w2", "part-2.safetensors"}}}};
  for (int i = 0; i < cases; ++i) {
    f.fresh_scratch();
    const std::string dir = f.scratch();
    safetensors::save_file(dir + "/part-1.safetensors", {{"w1", torch::ones({3})}});
    safetensors::save_file(dir + "/part-2.safetensors", {{"w2", torch::ones({2, 2})}});
    ::mkfifo((dir + "/fifo").c_str(), 0644);
    fs::create_symlink("/dev/zero", dir + "/zero");
    fs::create_symlink(f.victims().path(2), dir + "/linkout");
    std::string what;
    std::string text;
    if (i % 2 == 0) {
      nlohmann::json doc = base;
      const std::string tensor = pick(f.rng(), 3) == 0 ? "w3" : (pick(f.rng(), 2) ? "w1" : "w2");
      const std::string name = names[pick(f.rng(), names.size())];
      doc["weight_map"][tensor] = name;
      what = "weight_map[" + tensor + "] = " + name;
      text = doc.dump();
    } else {
      text = mutate_text(base.dump(), f.rng(), kJsonTokens, what);
    }
    const std::string index = dir + "/diffusion_pytorch_model.safetensors.index.json";
    write_text(index, text);
    f.run("safetensors index", what, [&] {
      const auto weights = PretrainedWeights::open({kSafetensorsFormat, "", "", index});
      for (const SourceTensor& t : weights->tensors()) weights->read(t);
    });
  }
}

TEST(InputFuzz, EveryReaderEndsInAResultOrOneClearLine) {
  const auto start = std::chrono::steady_clock::now();
  const TempDir root("input_fuzz");
  Fuzzer f(root);
  const std::string base_dir = root.sub("base");
  {
    SynthOptions o;
    o.samples = 6;
    o.samples_per_shard = 3;
    synthesize_dataset(base_dir, builtin_model_features("hymotion_tiny"), o);
  }
  fuzz_safetensors(f, 150);
  fuzz_archives(f, 150);
  fuzz_yaml(f, 150);
  fuzz_datasets(f, base_dir, 120);
  fuzz_indexes(f, 100);
  f.print_counts();
  for (const auto& [format, c] : f.counts())
    EXPECT_GT(c.refused, 0) << format << ": no mutation was refused; the suite does not reach the checks";
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  EXPECT_LT(usage.ru_maxrss, kPeakRssKiB) << "peak memory of the fuzz run";
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "[fuzz] " << seconds << " s, peak RSS " << usage.ru_maxrss / 1024 << " MiB\n";
  EXPECT_LT(seconds, kSuiteSeconds);
}

}  // namespace
}  // namespace zest::testing
