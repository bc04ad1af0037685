// Every reader of a file from a stranger has limits: no input nests deep enough to overflow the stack,
// no length wraps a bounds check, architecture fields are range-checked (naming the key and the largest
// value accepted) before anything is allocated, tensor views are checked by zest (not LibTorch), and
// parse errors name the file and the byte offset or line instead of "stoll"/"stoull"/"stod".
#include "inputs/inputs_test_util.h"

#include "formats/safetensors.h"
#include "core/config_reader.h"
#include "core/untrusted_file.h"
#include "formats/json_text.h"
#include "formats/pickle_reader.h"
#include "models/hymotion/released_format.h"
#include "formats/torch_archive.h"
#include "formats/yaml_subset.h"
#include "models/model_memory.h"
#include "models/model_resolve.h"
#include "models/registry.h"
#include "models/pretrained_source.h"

#include <nlohmann/json.hpp>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

std::string repeat(const std::string& piece, size_t n) {
  std::string out;
  out.reserve(piece.size() * n);
  for (size_t i = 0; i < n; ++i) out += piece;
  return out;
}

// ---- YAML (HY-Motion config.yml) ----

TEST(BoundedParsers, YamlNestingIsBounded) {
  for (const std::string& open : {std::string("["), std::string("{a: ")}) {
    const std::string text = "network_module_args: " + repeat(open, 100000) + "\n";
    expect_zest_error([&] { read_yaml_entries(text, "deep.yml", {"network_module_args"}); },
                 {"deep.yml:1: flow collections nested deeper than 64 levels"});
  }
  std::string block = "network_module_args:\n";
  for (int i = 1; i <= 5000; ++i) block += std::string(static_cast<size_t>(i), ' ') + "k:\n";
  expect_zest_error([&] { read_yaml_entries(block, "blocks.yml", {"network_module_args"}); },
               {"blocks.yml:", "nested deeper than 64 levels"});
  // A flow list over 200,000 lines is read in linear time (it used to rescan the text per line).
  std::string long_list = "network_module_args: [\n";
  for (int i = 0; i < 200000; ++i) long_list += "  1,\n";
  long_list += "  1]\n";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(read_yaml_entries(long_list, "long.yml", {"network_module_args"})["network_module_args"].size(),
            200001u);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
}

TEST(BoundedParsers, YamlNumbersNeverThrowLibraryErrors) {
  const auto v = read_yaml_entries("a: 1.0e+999\nb: -1.0e+999\nc: 99999999999999999999999\n", "n.yml",
                                             {"a", "b", "c"});
  EXPECT_TRUE(std::isinf(v["a"].get<double>()));  // as PyYAML's float() reads it
  EXPECT_LT(v["b"].get<double>(), 0);
  EXPECT_TRUE(v["c"].is_string());  // too large for an integer: kept as text, refused where an int is needed
}

TEST(BoundedParsers, HyMotionNumLayersIsRangeChecked) {
  const TempDir dir("bounded_hy");
  write_text(dir.sub("config.yml"),
             "network_module: hymotion/network/hymotion_mmdit.HunyuanMotionMMDiT\nnetwork_module_args:\n"
             "  input_dim: 8\n  feat_dim: 32\n  num_heads: 2\n  num_layers: 999999999\n");
  write_text(dir.sub("latest.ckpt"), "");
  const ResolvedModel model = resolve_pretrained_folder(dir.path());
  expect_zest_error([&] { count_model_parameters(model); },
               {"num_layers", "is 999999999; the largest value zest accepts is 999"});
}

// ---- JSON configs (diffusers config.json) ----

void expect_unet_refused(const nlohmann::json& config, const std::vector<std::string>& parts) {
  const TempDir dir("bounded_unet");
  write_text(dir.sub("config.json"), config.dump());
  write_text(dir.sub("diffusion_pytorch_model.safetensors"), "");
  expect_zest_error([&] { count_model_parameters(resolve_pretrained_folder(dir.path())); }, parts);
}

TEST(BoundedParsers, DiffusersArchitectureIsRangeChecked) {
  expect_unet_refused({{"layers_per_block", 1000000000}},
                      {"layers_per_block", "is 1000000000; the largest value zest accepts is 64"});
  expect_unet_refused({{"layers_per_block", 1e9}}, {"layers_per_block"});  // a float where an integer belongs
  expect_unet_refused({{"down_block_types", {"DownBlock2D", "DownBlock2D", "DownBlock2D"}},
                       {"up_block_types", {"UpBlock2D", "UpBlock2D", "UpBlock2D"}},
                       {"block_out_channels", {32, 64, 64}},
                       {"transformer_layers_per_block", {1, 1, 1000000}}},
                      {"transformer_layers_per_block", "[2] is 1000000; the largest value zest accepts is 128"});
  expect_unet_refused({{"block_out_channels", {320, 640, 1280, 1 << 30}}},
                      {"block_out_channels", "[3] is 1073741824", "65536"});
}

TEST(BoundedParsers, JsonNestingIsBounded) {
  const TempDir dir("bounded_json");
  write_text(dir.sub("config.json"), "{\"a\": " + repeat("[", 100000) + repeat("]", 100000) + "}");
  write_text(dir.sub("diffusion_pytorch_model.safetensors"), "");
  expect_zest_error([&] { resolve_pretrained_folder(dir.path()); }, {"config.json", "nested deeper than 64 levels"});
  expect_zest_error([&] { parse_json("[1, 2", "x.json"); }, {"x.json: not valid JSON"});
}

// ---- safetensors headers ----

void write_header(const std::string& path, const std::string& header, const std::string& data = "") {
  write_text(path, pickle_le(header.size(), 8) + header + data);
}

TEST(BoundedParsers, SafetensorsHeaderLimitsAndEscapedNames) {
  const TempDir dir("bounded_st");
  const std::string path = dir.sub("h.safetensors");
  write_header(path, "{\"a\": " + repeat("[", 100000) + repeat("]", 100000) + "}");
  expect_zest_error([&] { safetensors::Reader r(path); }, {path, "nests deeper"});
  write_header(path, R"({"\u001b[31mred": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", "abcd");
  const std::string message = zest_error_of([&] { safetensors::Reader r(path); });
  EXPECT_NE(message.find("tensor '\\x1b[31mred'"), std::string::npos) << message;
  EXPECT_EQ(message.find('\x1b'), std::string::npos) << "a raw escape sequence reached the message";
}

// ---- pickle programs ----

TEST(BoundedParsers, PickleDeepNestingNeitherRecursesNorCrashes) {
  // 10^6 nested lists: ']' × N, then APPEND × (N - 1) puts each list into the one below it.
  const size_t n = 1000000;
  const std::string program = "\x80\x02" + repeat("]", n) + repeat("a", n - 1) + ".";
  {
    const PickleRef root = unpickle(program, "deep.pkl");
    EXPECT_EQ(root->kind, PickleValue::Kind::list);
  }  // destroyed here, iteratively
  SUCCEED();
}

TEST(BoundedParsers, PickleSelfReferencingRebuildIsRefused) {
  // T = (_rebuild_from_type_v2, None) with T appended to itself: T[2] is T, so the call unwraps forever.
  const std::string get0{'h', '\0'}, get1{'h', '\1'};
  const std::string program = std::string("\x80\x02") + "ctorch._tensor\n_rebuild_from_type_v2\n" +
                              std::string{'q', '\0'} + "(" + get0 + "Nt" + std::string{'q', '\1'} + get1 + "a0" + get0 +
                              get1 + "R.";
  expect_zest_error([&] { unpickle(program, "self.pkl"); },
               {"self.pkl: data.pkl byte", "calls nested more than 8 deep"});
}

TEST(BoundedParsers, PickleLengthsCannotWrap) {
  // BINBYTES8 with a length of 2^64 - 9: pos + n wrapped the old bounds check.
  const std::string program = std::string("\x80\x02\x8e", 3) + pickle_le(~uint64_t{0} - 8, 8) + ".";
  expect_zest_error([&] { unpickle(program, "len.pkl"); },
               {"len.pkl: data.pkl byte 2 (opcode 0x8e)", "a length of 18446744073709551607 bytes runs past the end"});
  const std::string unicode8 = std::string("\x80\x02\x8d", 3) + pickle_le(~uint64_t{0}, 8) + ".";
  expect_zest_error([&] { unpickle(unicode8, "u8.pkl"); }, {"u8.pkl", "runs past the end"});
}

TEST(BoundedParsers, PickleTextArgumentsNameTheOffset) {
  const std::string put = std::string("\x80\x02N") + "pabc\n.";
  const std::string message = zest_error_of([&] { unpickle(put, "p.pkl"); });
  EXPECT_NE(message.find("p.pkl: data.pkl byte 3 (opcode 0x70): 'abc' is not an integer"), std::string::npos) << message;
  EXPECT_EQ(message.find("stoull"), std::string::npos);
  expect_zest_error([&] { unpickle("\x80\x02I99999999999999999999999\n.", "i.pkl"); },
               {"i.pkl: data.pkl byte 2", "is not an integer"});
  expect_zest_error([&] { unpickle("\x80\x02g12x\n.", "g.pkl"); }, {"g.pkl", "'12x' is not an integer"});
}

TEST(BoundedParsers, PickleValueCountIsBounded) {
  // EMPTY_LIST × (limit + 1): refused at the value past the limit (a smaller limit keeps the test light).
  const std::string program = "\x80\x02" + repeat("]", 1001) + ".";
  expect_zest_error([&] { unpickle(program, "many.pkl", 1000); }, {"many.pkl: data.pkl byte 1002", "creates more than 1000"});
}

// ---- tensor views of a torch.save archive ----

std::string view_error(const std::string& path, int64_t storage_numel, int64_t offset, std::vector<int64_t> size,
                       std::vector<int64_t> stride, size_t record_floats = 4) {
  write_archive(path, state_dict_program("w", storage_numel, offset, size, stride),
                {{"0", std::string(record_floats * 4, '\0')}});
  return zest_error_of([&] {
    const TorchArchiveReader archive(path);
    for (const ArchiveTensor& t : archive.state_dict("model_state_dict")) archive.read(t);
  });
}

TEST(BoundedParsers, BadTensorViewsAreRefusedByName) {
  const TempDir dir("bounded_views");
  const std::string path = dir.sub("latest.ckpt");
  write_archive(path, state_dict_program("w", 4, 0, {2, 2}, {2, 1}), {{"0", std::string(16, '\0')}});
  {
    const TorchArchiveReader archive(path);
    const auto tensors = archive.state_dict("model_state_dict");
    ASSERT_EQ(tensors.size(), 1u);
    EXPECT_EQ(archive.read(tensors[0]).sizes(), (std::vector<int64_t>{2, 2}));
  }
  for (const std::string& message :
       {view_error(path, 4, 0, {2, 2}, {-2, 1}), view_error(path, 4, 0, {-2, 2}, {2, 1})})
    EXPECT_NE(message.find(path + ": data.pkl byte"), std::string::npos) << message;
  for (const std::string& message :
       {view_error(path, 4, 0, {int64_t{1} << 62, 4}, {4, 1}), view_error(path, 4, 0, {3, 3}, {int64_t{1} << 62, 1}),
        view_error(path, int64_t{1} << 62, 0, {2}, {1}), view_error(path, 4, 3, {2}, {1}),
        view_error(path, 0, 0, {int64_t{1} << 40}, {1})}) {
    EXPECT_NE(message.find(path + ": tensor 'w'"), std::string::npos) << message;
    EXPECT_EQ(message.find("Exception raised from"), std::string::npos) << message;
  }
}

// ---- zip records of a torch.save archive ----

// `path` with `record` marked deflated in the zip directory and its uncompressed size set to `size`: a
// deflate bomb's directory entry (LibTorch's zip reader accepts it and allocates `size` bytes to inflate).
void patch_directory_size(const std::string& path, const std::string& record, uint32_t size) {
  std::string bytes = read_text(path);
  const std::string entry("PK\x01\x02", 4);
  for (size_t at = bytes.find(entry); at != std::string::npos; at = bytes.find(entry, at + 4)) {
    const size_t name_len = static_cast<unsigned char>(bytes[at + 28]) | static_cast<unsigned char>(bytes[at + 29]) << 8;
    const std::string name = bytes.substr(at + 46, name_len);
    if (name.size() < record.size() || name.compare(name.size() - record.size(), record.size(), record) != 0) continue;
    bytes[at + 10] = 8;  // method: deflate
    for (int i = 0; i < 4; ++i) bytes[at + 24 + i] = static_cast<char>((size >> (8 * i)) & 0xff);
    write_text(path, bytes);
    return;
  }
  ADD_FAILURE() << "no directory entry for " << record;
}

// A record's stated size is what LibTorch's zip reader allocates: a compressed record stating more bytes than
// the whole archive (data.pkl or a tensor's storage) is refused by zest, naming the record, before it is read.
TEST(BoundedParsers, ZipRecordSizesAreBoundedByTheArchive) {
  const TempDir dir("bounded_zip");
  const std::string path = dir.sub("latest.ckpt");
  write_archive(path, state_dict_program("w", 4, 0, {4}, {1}), {{"0", std::string(16, '\0')}});
  patch_directory_size(path, "/data.pkl", 0x7fff0000u);
  expect_zest_error([&] { TorchArchiveReader archive(path); },
               {path + ": data.pkl: record data.pkl states 2147418112 bytes, more than the 268435456 it may hold"});
  write_archive(path, state_dict_program("w", 4, 0, {4}, {1}), {{"0", std::string(16, '\0')}});
  patch_directory_size(path, "/data/0", 0x7fff0000u);
  const TorchArchiveReader archive(path);
  const auto tensors = archive.state_dict("model_state_dict");
  ASSERT_EQ(tensors.size(), 1u);
  expect_zest_error([&] { archive.read(tensors[0]); },
               {path + ": tensor 'w': record data/0 states 2147418112 bytes, more than the whole archive's",
                "torch.save stores records uncompressed"});
  write_text(path, "PK" + std::string(100, '\0'));  // no directory at all
  expect_zest_error([&] { TorchArchiveReader archive(path); }, {path});
}

// ---- memory for a model, checked before it is built ----

// Every field within its range, the whole far beyond any machine: HY-Motion at width 65536 with 201 layers
// (~10^13 parameters). build_model (train, bench, the inference examples) refuses it, naming the fields.
TEST(BoundedParsers, ModelLargerThanTheMachineIsRefusedBeforeItIsBuilt) {
  ResolvedModel huge;
  huge.family = &model_family("hymotion");
  huge.source = "huge.toml";
  huge.toml_text = "input_dim = 12\nfeat_dim = 65536\noutput_dim = 12\nctxt_input_dim = 24\nvtxt_input_dim = 16\n"
                   "num_layers = 201\nnum_heads = 4\n";
  const auto start = std::chrono::steady_clock::now();
  expect_zest_error([&] { build_model(huge); },
               {"huge.toml: this model has ", " parameters: ", "more than the host's available memory (MemAvailable)",
                "refused before building it. Its largest size fields: feat_dim = 65536, num_layers = 201"});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  // The rule itself, against a stated amount of memory.
  EXPECT_EQ(model_memory_problem("m.toml", "a = 1", 1000, 4, 4000, "X"), "");
  EXPECT_EQ(model_memory_problem("m.toml", "a = 1", 1000, 4, -1, "X"), "");  // unknown: not checked
  EXPECT_NE(model_memory_problem("m.toml", "a = 1", 1000, 4, 3999, "X").find("m.toml: this model has 1000 parameters"),
            std::string::npos);
  EXPECT_NE(model_memory_problem("m.toml", "a = 1", int64_t{1} << 62, 4, 1 << 30, "X").find("more bytes than a 64-bit"),
            std::string::npos);
  const ConfigTable fields = ConfigTable::parse_string("a = 3\nb = [1, 70]\n[t]\nc = 9\nd = \"x\"\n", "f.toml");
  EXPECT_EQ(largest_size_fields(fields), "b = 70, t.c = 9, a = 3");
}

// ---- ConfigTable messages ----

// Keys and string values read from a config file are echoed escaped: a quoted key or a string holding an
// escape sequence cannot recolour or retitle the terminal.
TEST(BoundedParsers, ConfigMessagesEscapeKeysAndValues) {
  ConfigTable unknown = ConfigTable::parse_string("\"evil\\u001b[31m\" = 1\n", "k.toml");
  const std::string key_message = zest_error_of([&] { unknown.reject_unknown_keys(); });
  EXPECT_NE(key_message.find("evil\\x1b[31m: unknown key"), std::string::npos) << key_message;
  ConfigTable value = ConfigTable::parse_string("a = \"\\u001b]0;title\\u0007\"\nb = \"\\u009b2J\"\n", "v.toml");
  const std::string type_message = zest_error_of([&] { value.get<int64_t>("a", 0); });
  EXPECT_NE(type_message.find("a string (\"\\x1b]0;title\\x07\")"), std::string::npos) << type_message;
  const std::string choice_message = zest_error_of([&] { value.get_choice("b", "x", {"x", "y"}); });
  EXPECT_NE(choice_message.find("\"\\xc2\\x9b2J\" is not one of"), std::string::npos) << choice_message;
  for (const std::string& m : {key_message, type_message, choice_message}) {
    EXPECT_EQ(m.find('\x1b'), std::string::npos) << m;
    EXPECT_EQ(m.find('\x07'), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace zest::testing
