// Fuzz classes of the inputs a pipeline folder, a dataset folder, a checkpoint folder and the launch
// environment bring: deep JSON in every reader, FIFOs and /dev/zero in place of each file, sparse files of
// gigabytes, absurd architecture fields, PNG and JPEG bombs, long captions and hostile launch variables.
// Every case must end in a result or one clear zest::Error line naming the file, key or variable (no
// library text, no raw escape sequence), within a per-case alarm, and each class keeps the process's
// peak memory within a bound over what it held before. Each class runs in a second or two.
#include "inputs/inputs_test_util.h"

#include "checkpoint/directory.h"
#include "checkpoint/manifest.h"
#include "comm/launch_env.h"
#include "comm/rendezvous.h"
#include "core/untrusted_file.h"
#include "data/image_decode.h"
#include "data/image_folder.h"
#include "formats/input_limits.h"
#include "models/clip/clip_text_model.h"
#include "models/clip/clip_tokenizer.h"
#include "models/unet/scheduler_config.h"
#include "models/vae/autoencoder_kl.h"
#include "pipelines/sd_pipeline.h"
#include "prepare/tiny_pipeline.h"

#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <sys/stat.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <random>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kPipelineAlarmSeconds = 20;                // one case takes milliseconds; a hang ends the process
constexpr double kCaseSeconds = 5.0;             // what a case may take on a loaded 2-core machine
constexpr long kClassGrowthKiB = 768L << 10;     // peak memory a class may add (far below any bomb's)

char g_pipeline_case[256] = "";
extern "C" void on_case_alarm(int) {
  const char prefix[] = "\npipeline fuzz case hung: ";
  [[maybe_unused]] auto a = ::write(2, prefix, sizeof(prefix) - 1);
  [[maybe_unused]] auto b = ::write(2, g_pipeline_case, std::strlen(g_pipeline_case));
  ::_exit(3);
}

// The process's resident peak (VmHWM), reset first when the kernel allows (clear_refs 5), so that a
// class is measured from what the process holds when it starts.
long peak_kib(bool reset) {
  if (reset) std::ofstream("/proc/self/clear_refs") << "5";
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return 0;
}
long resident_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return 0;
}

class FuzzClass {
 public:
  explicit FuzzClass(std::string name) : name_(std::move(name)), start_rss_(resident_kib()) {
    peak_kib(/*reset=*/true);
    std::signal(SIGALRM, on_case_alarm);
  }
  ~FuzzClass() {
    std::signal(SIGALRM, SIG_DFL);
    const long growth = peak_kib(false) - start_rss_;
    EXPECT_LT(growth, kClassGrowthKiB) << name_ << ": peak memory grew by " << growth / 1024 << " MiB";
    std::cout << "[pipeline fuzz] " << name_ << ": " << cases_ << " cases, peak +" << std::max(0L, growth) / 1024
              << " MiB\n";
  }

  // Runs `body`, which must throw a zest::Error whose one-line message holds every part of `parts`.
  void refused(const std::string& what, const std::vector<std::string>& parts, const std::function<void()>& body) {
    const std::string message = run(what, body, /*must_refuse=*/true);
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << g_pipeline_case << ": message lacks '" << part << "': " << message;
  }
  // Runs `body`, which may end either way; a refusal must be a clear line.
  void ends(const std::string& what, const std::function<void()>& body) { run(what, body, false); }

 private:
  std::string run(const std::string& what, const std::function<void()>& body, bool must_refuse) {
    std::snprintf(g_pipeline_case, sizeof(g_pipeline_case), "%s: %s", name_.c_str(), what.c_str());
    ++cases_;
    const auto start = Clock::now();
    ::alarm(kPipelineAlarmSeconds);
    std::string message;
    bool refused = false;
    try {
      body();
    } catch (const Error& e) {
      refused = true;
      message = e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << g_pipeline_case << ": not a zest::Error: " << e.what();
    }
    ::alarm(0);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_LT(seconds, kCaseSeconds) << g_pipeline_case << " took " << seconds << " s";
    if (must_refuse) {
      EXPECT_TRUE(refused) << g_pipeline_case << ": accepted";
    }
    if (refused) {
      EXPECT_EQ(message.find('\n'), std::string::npos) << g_pipeline_case << ": " << message;
      for (const char* internal : {"json.exception", "stoll", "stoi", "basic_string", "Storage size", "\x1b"})
        EXPECT_EQ(message.find(internal), std::string::npos) << g_pipeline_case << ": library text '" << internal << "': " << message;
    }
    return message;
  }

  std::string name_;
  long start_rss_;
  int cases_ = 0;
};

std::string deep_json(int levels) {
  return "{\"a\": " + std::string(static_cast<size_t>(levels), '[') + std::string(static_cast<size_t>(levels), ']') + "}";
}

// A fresh copy of the tiny SD1.5 pipeline folder.
fs::path pipeline_copy(const TempDir& root, const std::string& name) {
  const fs::path dir = fs::path(root.path()) / name;
  fs::remove_all(dir);
  fs::copy(std::string(ZEST_TEST_DATA) + "/sd_tiny/sd15", dir, fs::copy_options::recursive);
  return dir;
}

// What reads each JSON file of a pipeline folder, and the file.
struct PipelineReader {
  std::string file;  // relative to the pipeline folder
  std::function<void(const fs::path& dir)> read;
};

std::vector<PipelineReader> pipeline_readers() {
  const auto tokenizer = [](const fs::path& dir) { clip::CLIPTokenizer::from_folder(dir / "tokenizer"); };
  return {
      {"text_encoder/config.json", [](const fs::path& dir) { clip::load_clip_text_model(dir / "text_encoder"); }},
      {"tokenizer/vocab.json", tokenizer},
      {"tokenizer/tokenizer_config.json", tokenizer},
      {"tokenizer/special_tokens_map.json", tokenizer},
      {"scheduler/scheduler_config.json",
       [](const fs::path& dir) { unet::SchedulerConfig::from_file(dir / "scheduler/scheduler_config.json"); }},
      {"vae/config.json", [](const fs::path& dir) { vae::load_autoencoder_kl(dir / "vae"); }},
      {"model_index.json",
       [](const fs::path& dir) { load_sd_pipeline(dir, WeightsSource{}, torch::kCPU, torch::kFloat32); }},
  };
}

// A checkpoint root with one step folder whose manifest.json holds `text`, and `latest` naming it.
fs::path checkpoint_root(const TempDir& root, const std::string& manifest_text) {
  const fs::path dir = fs::path(root.path()) / "ckpt";
  fs::remove_all(dir);
  fs::create_directories(dir / "step_00000001");
  write_text((dir / "step_00000001" / checkpoint::kManifestName).string(), manifest_text);
  write_text((dir / "latest").string(), "step_00000001\n");
  return dir;
}

// ---- deep JSON in each reader ----

TEST(PipelineFuzz, DeepJsonInEveryReader) {
  const TempDir root("pipeline_fuzz_deep");
  FuzzClass f("deep JSON");
  for (const PipelineReader& r : pipeline_readers()) {
    for (const int levels : {kMaxJsonDepth + 1, 100000}) {
      const fs::path dir = pipeline_copy(root, "p");
      write_text((dir / r.file).string(), deep_json(levels));
      f.refused(r.file + " nested " + std::to_string(levels), {fs::path(r.file).filename().string(), "nested deeper than 64"},
                [&] { r.read(dir); });
    }
  }
  {  // tokenizer.json (transformers 5) in place of vocab.json + merges.txt
    const fs::path dir = pipeline_copy(root, "p");
    fs::remove(dir / "tokenizer/vocab.json");
    write_text((dir / "tokenizer/tokenizer.json").string(), deep_json(100000));
    f.refused("tokenizer.json nested", {"tokenizer.json", "nested deeper"},
              [&] { clip::CLIPTokenizer::from_folder(dir / "tokenizer"); });
  }
  const fs::path ckpt = checkpoint_root(root, deep_json(100000));
  f.refused("manifest.json nested", {"manifest.json", "nested deeper than 64"},
            [&] { checkpoint::read_manifest((ckpt / "step_00000001").string()); });
  {  // a metadata.jsonl line: that line is skipped with the reason, the others are used
    const fs::path images = fs::path(root.path()) / "images";
    fs::create_directories(images);
    write_png(images / "a.png", 8, 8, 1);
    write_text((images / "metadata.jsonl").string(),
               deep_json(100000) + "\n{\"file_name\": \"a.png\", \"text\": \"a cat\"}\n");
    f.ends("metadata.jsonl nested line", [&] {
      const ImageFolderListing listing = list_image_folder(images.string());
      ASSERT_EQ(listing.images.size(), 1u);
      ASSERT_FALSE(listing.skipped.empty());
      EXPECT_NE(listing.skipped[0].reason.find("nested deeper"), std::string::npos) << listing.skipped[0].reason;
    });
  }
}

// ---- FIFOs and /dev/zero in place of each file ----

TEST(PipelineFuzz, FifosAndDevicesInPlaceOfEveryFile) {
  const TempDir root("pipeline_fuzz_fifo");
  FuzzClass f("FIFO and /dev/zero");
  std::vector<PipelineReader> readers = pipeline_readers();
  readers.push_back({"tokenizer/merges.txt", [](const fs::path& dir) { clip::CLIPTokenizer::from_folder(dir / "tokenizer"); }});
  for (const PipelineReader& r : readers) {
    for (const bool fifo : {true, false}) {
      const fs::path dir = pipeline_copy(root, "p");
      const fs::path file = dir / r.file;
      fs::remove(file);
      if (fifo) ASSERT_EQ(::mkfifo(file.c_str(), 0644), 0);
      else fs::create_symlink("/dev/zero", file);
      f.refused(r.file + (fifo ? " FIFO" : " /dev/zero"),
                {fs::path(r.file).filename().string(), fifo ? "FIFO" : "character device"}, [&] { r.read(dir); });
    }
  }
  for (const char* name : {"manifest.json", "latest"}) {
    const fs::path ckpt = checkpoint_root(root, "{}");
    const fs::path file = std::string(name) == "latest" ? ckpt / "latest" : ckpt / "step_00000001" / name;
    fs::remove(file);
    ASSERT_EQ(::mkfifo(file.c_str(), 0644), 0);
    if (std::string(name) == "latest") {
      // `latest` unreadable: the newest committed checkpoint is used, with a note naming the file.
      f.ends("latest FIFO", [&] {
        EXPECT_EQ(fs::path(checkpoint::find_latest(ckpt.string()).value_or("")).filename(), "step_00000001");
      });
    } else {
      f.refused("manifest.json FIFO", {"manifest.json", "FIFO"},
                [&] { checkpoint::read_manifest((ckpt / "step_00000001").string()); });
    }
  }
  {
    const fs::path images = fs::path(root.path()) / "images";
    fs::remove_all(images);
    fs::create_directories(images);
    write_png(images / "a.png", 8, 8, 1);
    write_png(images / "b.png", 8, 8, 2);
    write_text((images / "a.txt").string(), "a cat");
    ASSERT_EQ(::mkfifo((images / "b.txt").c_str(), 0644), 0);
    f.ends("caption .txt FIFO", [&] {
      const ImageFolderListing listing = list_image_folder(images.string());
      EXPECT_EQ(listing.images.size(), 1u);
    });
    ASSERT_EQ(::mkfifo((images / "metadata.jsonl").c_str(), 0644), 0);
    f.refused("metadata.jsonl FIFO", {"metadata.jsonl", "FIFO"}, [&] { list_image_folder(images.string()); });
  }
}

// ---- sparse files of gigabytes ----

void make_sparse(const fs::path& path, int64_t bytes) {
  fs::remove(path);
  write_text(path.string(), "");
  ASSERT_EQ(::truncate(path.c_str(), bytes), 0);
}

TEST(PipelineFuzz, SparseGiantFilesAreRefusedBySize) {
  const TempDir root("pipeline_fuzz_sparse");
  FuzzClass f("sparse giant files");
  const int64_t two_gb = int64_t{2} << 30;
  std::vector<PipelineReader> readers = pipeline_readers();
  readers.push_back({"tokenizer/merges.txt", [](const fs::path& dir) { clip::CLIPTokenizer::from_folder(dir / "tokenizer"); }});
  for (const PipelineReader& r : readers) {
    const fs::path dir = pipeline_copy(root, "p");
    make_sparse(dir / r.file, two_gb);
    f.refused(r.file + " 2 GB", {fs::path(r.file).filename().string(), "2147483648 bytes, more than"},
              [&] { r.read(dir); });
  }
  {
    const fs::path ckpt = checkpoint_root(root, "{}");
    make_sparse(ckpt / "step_00000001" / checkpoint::kManifestName, two_gb);
    f.refused("manifest.json 2 GB", {"manifest.json", "2147483648 bytes"},
              [&] { checkpoint::read_manifest((ckpt / "step_00000001").string()); });
    write_text((ckpt / "step_00000001" / checkpoint::kManifestName).string(), "{}");
    make_sparse(ckpt / "latest", int64_t{4} << 30);
    // `latest` unreadable: the newest committed step folder is taken instead, at once.
    f.ends("latest 4 GB", [&] {
      EXPECT_EQ(fs::path(checkpoint::find_latest(ckpt.string()).value_or("")).filename(), "step_00000001");
    });
  }
  {
    const fs::path images = fs::path(root.path()) / "images";
    fs::create_directories(images);
    write_png(images / "a.png", 8, 8, 1);
    make_sparse(images / "a.txt", two_gb);
    f.refused("caption .txt 2 GB", {"none of the 1 images has a caption", "a.txt", "2147483648 bytes"},
              [&] { list_image_folder(images.string()); });
    make_sparse(images / "metadata.jsonl", two_gb);
    f.refused("metadata.jsonl 2 GB", {"metadata.jsonl", "2147483648 bytes"}, [&] { list_image_folder(images.string()); });
  }
}

// ---- absurd architecture fields ----

void set_json_field(const fs::path& file, const std::string& key, const nlohmann::json& value) {
  nlohmann::json doc = nlohmann::json::parse(read_text(file.string()));
  doc[key] = value;
  write_text(file.string(), doc.dump());
}

TEST(PipelineFuzz, AbsurdArchitectureFieldsAreRefusedByKey) {
  const TempDir root("pipeline_fuzz_fields");
  FuzzClass f("absurd fields");
  const auto text_encoder = [](const fs::path& dir) { clip::load_clip_text_model(dir / "text_encoder"); };
  const auto vae_reader = [](const fs::path& dir) { vae::load_autoencoder_kl(dir / "vae"); };
  const auto scheduler = [](const fs::path& dir) { unet::SchedulerConfig::from_file(dir / "scheduler/scheduler_config.json"); };
  struct Field {
    std::string file, key;
    nlohmann::json value;
    std::function<void(const fs::path&)> read;
    std::string expected;
  };
  const std::vector<Field> fields = {
      {"text_encoder/config.json", "num_hidden_layers", 1000000000, text_encoder, "must be an integer in [1, 256]"},
      {"text_encoder/config.json", "hidden_size", int64_t{1} << 40, text_encoder, "must be an integer in [1, 16384]"},
      {"text_encoder/config.json", "vocab_size", 1e12, text_encoder, "must be an integer in [1, 1048576], got a number with a fraction"},
      {"text_encoder/config.json", "intermediate_size", uint64_t{18446744073709551615u}, text_encoder, "must be an integer in [1, 65536]"},
      {"text_encoder/config.json", "max_position_embeddings", -1, text_encoder, "must be an integer in [1, 16384]"},
      {"text_encoder/config.json", "layer_norm_eps", "1e-5", text_encoder, "must be a finite number in (0, 1)"},
      {"vae/config.json", "layers_per_block", 1000000, vae_reader, "must be an integer in [1, 64]"},
      {"vae/config.json", "block_out_channels", {8, int64_t{1} << 31}, vae_reader, "must be an integer in [1, 16384]"},
      {"vae/config.json", "latent_channels", 0, vae_reader, "must be an integer in [1, 16384]"},
      {"vae/config.json", "scaling_factor", "big", vae_reader, "must be a finite number > 0"},
      {"scheduler/scheduler_config.json", "num_train_timesteps", int64_t{1} << 40, scheduler, "must be an integer in [2, 100000]"},
      {"scheduler/scheduler_config.json", "beta_end", 5, scheduler, "must be a finite number in (0, 1)"},
      {"scheduler/scheduler_config.json", "steps_offset", 5000, scheduler, "it must be less than num_train_timesteps"},
      {"scheduler/scheduler_config.json", "beta_start", -1, scheduler, "must be a finite number in (0, 1)"},
  };
  for (const Field& field : fields) {
    const fs::path dir = pipeline_copy(root, "p");
    set_json_field(dir / field.file, field.key, field.value);
    f.refused(field.file + " " + field.key + " = " + field.value.dump(), {field.file, "field '" + field.key, field.expected},
              [&] { field.read(dir); });
  }
  {  // every field within its bound, the whole far past any machine: refused before it is built
    const fs::path dir = pipeline_copy(root, "p");
    for (const auto& [key, value] : std::vector<std::pair<std::string, int64_t>>{
             {"hidden_size", 16384}, {"intermediate_size", 65536}, {"num_hidden_layers", 256}, {"num_attention_heads", 128}})
      set_json_field(dir / "text_encoder/config.json", key, value);
    f.refused("text encoder of 800 G parameters", {"text_encoder/config.json", "parameters", "refused before building it"},
              [&] { text_encoder(dir); });
  }
  {  // a number the parser cannot hold, named by its key
    const fs::path dir = pipeline_copy(root, "p");
    write_text((dir / "vae/config.json").string(), R"({"layers_per_block": 1e309})");
    f.refused("vae layers_per_block 1e309", {"vae/config.json", "field 'layers_per_block'", "too large to represent"},
              [&] { vae_reader(dir); });
  }
}

// ---- PNG and JPEG bombs ----

// Bits into bytes, least significant first (deflate's order for fields; Huffman codes go in reversed).
class BitWriter {
 public:
  void bits(uint32_t value, int count) {
    for (int i = 0; i < count; ++i) put((value >> i) & 1);
  }
  void code(uint32_t value, int count) {  // a Huffman code, most significant bit first
    for (int i = count - 1; i >= 0; --i) put((value >> i) & 1);
  }
  std::string take() { return bytes_; }

 private:
  void put(uint32_t bit) {
    if (used_ == 0) bytes_.push_back('\0');
    bytes_.back() = static_cast<char>(bytes_.back() | (bit << used_));
    used_ = (used_ + 1) % 8;
  }
  std::string bytes_;
  int used_ = 0;
};

// A zlib stream that inflates to `zeros` (>= 1) zero bytes (one literal, then matches of 258 at distance
// 1 in a fixed-Huffman block, the rest literals): 13 bits per 258 bytes.
std::string zlib_of_zeros(uint64_t zeros) {
  BitWriter w;
  w.bits(1, 1);   // BFINAL
  w.bits(1, 2);   // fixed Huffman
  w.code(0x30, 8);  // literal 0
  uint64_t done = 1;
  for (; done + 258 <= zeros; done += 258) {
    w.code(0xC5, 8);  // length code 285: 258
    w.code(0, 5);     // distance code 0: 1
  }
  for (; done < zeros; ++done) w.code(0x30, 8);  // the rest as literals
  w.code(0, 7);  // end of block
  const uint32_t adler = (static_cast<uint32_t>(zeros % 65521) << 16) | 1;
  std::string out = "\x78\x01" + w.take();
  for (int s = 24; s >= 0; s -= 8) out += static_cast<char>((adler >> s) & 0xff);
  return out;
}

uint32_t crc32_of(const std::string& bytes) {
  uint32_t crc = 0xffffffffu;
  for (const char c : bytes) {
    crc ^= static_cast<uint8_t>(c);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
  }
  return ~crc;
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string png_chunk(const std::string& type, const std::string& data) {
  return be32(static_cast<uint32_t>(data.size())) + type + data + be32(crc32_of(type + data));
}

// An RGB 8-bit PNG declaring width × height whose image data inflates to `inflated` bytes.
std::string png_bomb(uint32_t width, uint32_t height, uint64_t inflated) {
  const std::string ihdr = be32(width) + be32(height) + std::string("\x08\x02\x00\x00\x00", 5);
  return std::string("\x89PNG\r\n\x1a\n", 8) + png_chunk("IHDR", ihdr) + png_chunk("IDAT", zlib_of_zeros(inflated)) +
         png_chunk("IEND", "");
}

TEST(PipelineFuzz, ImageBombsAndTruncatedImages) {
  const TempDir root("pipeline_fuzz_images");
  FuzzClass f("PNG/JPEG bombs");
  // The same construction at the declared size decodes (so the bombs below fail for their size alone).
  const uint64_t exact = (64 * 3 + 1) * 64;
  const RgbImage fine = decode_image_bytes(png_bomb(64, 64, exact), "exact.png");
  EXPECT_EQ(fine.width, 64);
  for (const uint64_t inflated : {uint64_t{64} << 20, uint64_t{2} << 30}) {
    const std::string bomb = png_bomb(64, 64, inflated);
    f.refused("PNG 64x64 inflating to " + std::to_string(inflated >> 20) + " MB",
              {"bomb.png", "decodes to more than its 64x64 header declares"},
              [&] { decode_image_bytes(bomb, "bomb.png"); });
  }
  {  // a large declared image within the pixel bound, its data a bomb past it: the total is bounded
    const std::string bomb = png_bomb(2048, 2048, uint64_t{3} << 30);
    f.refused("PNG 2048x2048 inflating to 3 GB", {"big.png", "decodes to more than"},
              [&] { decode_image_bytes(bomb, "big.png"); });
  }
  write_jpeg(fs::path(root.path()) / "whole.jpg", 64, 48, 3);
  const std::string jpeg = read_text(root.sub("whole.jpg"));
  EXPECT_EQ(decode_image_bytes(jpeg, "whole.jpg").height, 48);
  const size_t scan = jpeg.find("\xFF\xDA");
  ASSERT_NE(scan, std::string::npos);
  for (const double kept : {0.3, 0.6, 0.9}) {
    const size_t cut = scan + static_cast<size_t>(static_cast<double>(jpeg.size() - scan) * kept);
    const std::string with_end = jpeg.substr(0, cut) + "\xFF\xD9";
    f.refused(str("JPEG cut at ", kept, " + end marker"), {"cut.jpg", "truncated JPEG"},
              [&] { decode_image_bytes(with_end, "cut.jpg"); });
    const std::string with_garbage = jpeg.substr(0, cut) + std::string(100, '\x12');
    f.refused(str("JPEG cut at ", kept, " + other bytes"), {"cut.jpg", "truncated"},
              [&] { decode_image_bytes(with_garbage, "cut.jpg"); });
  }
}

// ---- long captions ----

TEST(PipelineFuzz, LongCaptionsAreCutAndTokenizedInLinearTime) {
  const TempDir root("pipeline_fuzz_captions");
  FuzzClass f("long captions");
  const clip::CLIPTokenizer tokenizer =
      clip::CLIPTokenizer::from_folder(std::string(ZEST_TEST_DATA) + "/sd_tiny/sd15/tokenizer");
  std::string words;
  while (words.size() < (size_t{50} << 20)) words += "a photo of a cat on a mat, ";
  const std::string one_word(size_t{2} << 20, 'x');
  f.ends("50 MB of words", [&] {
    const auto ids = tokenizer.encode_padded(words);
    EXPECT_EQ(ids.size(), 77u);
    EXPECT_EQ(ids, tokenizer.encode_padded(words.substr(0, 2000)));  // only the first 75 tokens matter
  });
  f.ends("a 2 MB word", [&] { EXPECT_EQ(tokenizer.encode_padded(one_word).size(), 77u); });
  const fs::path images = fs::path(root.path()) / "images";
  fs::create_directories(images);
  write_png(images / "a.png", 8, 8, 1);
  write_png(images / "b.png", 8, 8, 2);
  write_text((images / "metadata.jsonl").string(), nlohmann::json{{"file_name", "a.png"}, {"text", words}}.dump() +
                                                       "\n" + nlohmann::json{{"file_name", "b.png"}, {"text", "b"}}.dump());
  f.ends("50 MB metadata.jsonl line", [&] {
    const ImageFolderListing listing = list_image_folder(images.string());
    ASSERT_EQ(listing.images.size(), 2u);
    EXPECT_EQ(listing.images[0].caption.size(), kMaxCaptionBytes);
    EXPECT_EQ(listing.images[1].caption, "b");
    ASSERT_EQ(listing.notes.size(), 1u);
    EXPECT_NE(listing.notes[0].find("1 caption(s) longer than 8192 bytes were cut"), std::string::npos) << listing.notes[0];
  });
}

// ---- the launch environment ----

EnvLookup launch_env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

TEST(PipelineFuzz, LaunchEnvironmentValues) {
  FuzzClass f("launch environment");
  const std::vector<std::string> values = {"0", "-1", "1", "4", "2147483648", "99999999999999999999", "1e3", " 2",
                                           "2x", "\x1b[31m", std::string(100000, '7')};
  const std::vector<std::vector<std::string>> families = {
      {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"},
      {"HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_JOB_ID"}};
  std::mt19937 rng(4343);
  for (const auto& names : families) {
    for (int i = 0; i < 60; ++i) {
      std::map<std::string, std::string> vars{{"MASTER_ADDR", "127.0.0.1"}};
      std::string what;
      for (const std::string& name : names) {
        vars[name] = values[rng() % values.size()];
        what += name + "=" + printable(vars[name], 8) + " ";
      }
      f.ends(what, [&] {
        const WorldInfo w = read_launch_environment(launch_env_of(vars));
        EXPECT_TRUE(w.size >= 1 && w.rank >= 0 && w.rank < w.size && w.local_size >= 1 && w.node_rank >= 0) << what;
      });
    }
  }
  // The SIGFPE of issue 43: a zero count is refused by name before any division.
  f.refused("LOCAL_WORLD_SIZE=0", {"0 ranks on this node"},
            [] { read_launch_environment(launch_env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "0"}})); });
  f.refused("WORLD_SIZE=0", {"world size 0 must be >= 1"},
            [] { read_launch_environment(launch_env_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}, {"LOCAL_WORLD_SIZE", "0"}})); });
  f.refused("HOROVOD_LOCAL_SIZE=0", {"Horovod", "0 ranks on this node"}, [] {
    read_launch_environment(launch_env_of({{"HOROVOD_RANK", "1"}, {"HOROVOD_SIZE", "2"}, {"HOROVOD_LOCAL_SIZE", "0"}}));
  });
  f.refused("WORLD_SIZE=1 MASTER_PORT=99999", {"MASTER_PORT 99999 is not a TCP port"},
            [] { read_launch_environment(launch_env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "99999"}})); });
  f.refused("RANK with an escape sequence", {"RANK='\\x1b[31m' is not an integer"},
            [] { read_launch_environment(launch_env_of({{"RANK", "\x1b[31m"}, {"WORLD_SIZE", "2"}})); });
}

TEST(PipelineFuzz, UnresolvableMasterAddrFailsAtOnceNamingIt) {
  FuzzClass f("MASTER_ADDR");
  set_rendezvous_timeout(30);
  for (const int rank : {0, 1}) {
    WorldInfo w;
    w.launcher = Launcher::torchrun;
    w.rank = rank;
    w.size = 2;
    w.local_size = 2;
    w.local_rank = rank;
    w.master_addr = "no-such-host.invalid";
    w.master_port = 29731;
    w.source = "torchrun-style (RANK/WORLD_SIZE)";
    f.refused(str("rank ", rank), {"MASTER_ADDR 'no-such-host.invalid'", "does not resolve"}, [&] { join_world(w); });
  }
  set_rendezvous_timeout(300);
}

}  // namespace
}  // namespace zest::testing
