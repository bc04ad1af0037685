// Typed JSON fields (formats/json_field.h) and every reader of a JSON file through them: for each file zest
// reads (pipeline configs, tokenizer files, the Qwen files, safetensors index, dataset.json, metadata.jsonl,
// a work piece's records) a field of the wrong type, out of range or missing is refused with one line in
// one style, "FILE: field 'PATH' must be ..., got ..." (or "... is missing (expected ...)"), naming the file
// and the field's path, never the JSON library's text. The checkpoint's own records (extra.data,
// extra.lora, extra.model_source) are covered where a checkpoint is at hand: tests/lora and tests/launch.
// HowToAddAJsonField walks docs/design.md "How to add a JSON field" with a document of its own.
#include "inputs/inputs_test_util.h"

#include "checkpoint/manifest.h"
#include "data/dataset_manifest.h"
#include "data/image_folder.h"
#include "formats/json_field.h"
#include "formats/json_text.h"
#include "hytext/tiny_text_encoders.h"
#include "models/clip/clip_text_model.h"
#include "models/clip/clip_tokenizer.h"
#include "models/lora_run.h"
#include "models/pretrained_source.h"
#include "models/pretrained_weights.h"
#include "models/qwen3/qwen3_config.h"
#include "models/qwen3/qwen_tokenizer.h"
#include "models/unet/scheduler_config.h"
#include "models/vae/autoencoder_kl.h"
#include "pipelines/sd_pipeline.h"
#include "prepare/tiny_pipeline.h"

#include <nlohmann/json.hpp>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

// The message must be one line, hold every part, and carry no library text.
void expect_field_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  const std::string message = zest_error_of(fn);
  for (const std::string& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << "message lacks '" << part << "': " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  for (const char* internal : {"json.exception", "type must be", "cannot use operator", "key '", "basic_string"})
    EXPECT_EQ(message.find(internal), std::string::npos) << "library text '" << internal << "': " << message;
}

// ---- JsonField itself ----

template <typename Document>
void check_accessors(const std::string& kind) {
  SCOPED_TRACE(kind);
  const Document doc = Document::parse(R"({
    "n": 7, "x": 0.5, "s": "linear", "b": true, "none": null, "list": [1, 2, 3], "names": ["a", "b"],
    "xs": [0.5, 2], "map": {"a": "f1", "b": "f2"}, "widths": {"h": 4, "w": 8}, "odd key.": {"Ġthe": "x"},
    "big": 18446744073709551615, "neg": -3})");
  const JsonField root(doc, "f.json");
  EXPECT_EQ(root.at("n").integer(1, 10), 7);
  EXPECT_EQ(root.at("x").number(NumberRange::open(0, 1)), 0.5);
  EXPECT_EQ(root.at("n").number(), 7.0);
  EXPECT_EQ(root.at("s").one_of({"linear", "scaled_linear"}), "linear");
  EXPECT_EQ(root.at("s").choice<int>({{"scaled_linear", 1}, {"linear", 2}}), 2);
  EXPECT_TRUE(root.at("b").boolean());
  EXPECT_EQ(root.at("list").integers(1, 3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(root.at("names").strings(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(root.at("xs").numbers(NumberRange::positive()), (std::vector<double>{0.5, 2.0}));
  EXPECT_EQ(root.at("map").string_map(), (std::map<std::string, std::string>{{"a", "f1"}, {"b", "f2"}}));
  EXPECT_EQ(root.at("widths").integer_map(1), (std::map<std::string, int64_t>{{"h", 4}, {"w", 8}}));
  EXPECT_EQ(root.at("list").size(), 3u);
  EXPECT_EQ(root.at("map").dump(), R"({"a":"f1","b":"f2"})");
  // Optional members: the fallback when absent; present, they are checked like required ones.
  EXPECT_EQ(root.at("absent").integer_or(5, 1, 10), 5);
  EXPECT_EQ(root.at("absent").number_or(0.25), 0.25);
  EXPECT_FALSE(root.at("absent").boolean_or(false));
  EXPECT_EQ(root.at("absent").string_or("d"), "d");
  EXPECT_EQ(root.at("absent").one_of_or("linear", {"linear"}), "linear");
  EXPECT_FALSE(root.has("absent"));
  EXPECT_TRUE(root.has("none"));
  // A null is a value unless the reader says it stands for None (the default).
  expect_field_error([&] { root.at("none").integer_or(5); }, {"f.json: field 'none' must be an integer, got null"});
  EXPECT_EQ(root.null_as_absent().at("none").integer_or(5), 5);
  EXPECT_FALSE(root.null_as_absent().has("none"));
  EXPECT_TRUE(root.at("none").is_null());

  expect_field_error([&] { root.at("n").integer(8, 10); }, {"f.json: field 'n' must be an integer in [8, 10], got an integer (7)"});
  expect_field_error([&] { root.at("big").integer(); }, {"f.json: field 'big' must be an integer, got an integer (18446744073709551615)"});
  expect_field_error([&] { root.at("neg").integers(0); }, {"field 'neg' must be an array of integers >= 0, got an integer"});
  expect_field_error([&] { root.at("list").integers(2); }, {"field 'list[0]' must be an integer >= 2, got an integer (1)"});
  expect_field_error([&] { root.at("x").number(NumberRange::open(0.5, 1)); }, {"field 'x' must be a finite number in (0.5, 1), got"});
  expect_field_error([&] { root.at("neg").number(NumberRange::positive()); }, {"field 'neg' must be a finite number > 0, got an integer (-3)"});
  expect_field_error([&] { root.at("xs").numbers(NumberRange::closed(0, 1)); }, {"field 'xs[1]' must be a finite number in [0, 1]"});
  expect_field_error([&] { root.at("s").one_of({"epsilon", "v_prediction", "sample"}); },
                     {"field 's' must be one of \"epsilon\", \"v_prediction\" or \"sample\", got a string (\"linear\")"});
  expect_field_error([&] { root.at("n").string(); }, {"field 'n' must be a string, got an integer (7)"});
  expect_field_error([&] { root.at("s").boolean(); }, {"field 's' must be true or false, got a string"});
  expect_field_error([&] { root.at("missing").string(); }, {"f.json: field 'missing' is missing (expected a string)"});
  expect_field_error([&] { root.at("n").at("deeper"); }, {"field 'n' must be an object, got an integer"});
  expect_field_error([&] { root.at("names").string_map(); }, {"field 'names' must be an object of strings, got an array"});
  expect_field_error([&] { root.at("widths").integer_map(5); }, {"field 'widths.h' must be an integer >= 5"});
  // Keys that are not plain names are quoted (escaped) in the path.
  expect_field_error([&] { root.at("odd key.").at("Ġthe").integer(); }, {"field '[\"odd key.\"][\"Ġthe\"]' must be an integer"});
  // A value inside a larger file: its path starts where it sits.
  const JsonField inner(doc, "m.json", "extra");
  expect_field_error([&] { inner.at("n").string(); }, {"m.json: field 'extra.n' must be a string"});
  // The document itself: the file alone.
  const Document array = Document::parse("[1]");
  expect_field_error([&] { JsonField(array, "a.json").object(); }, {"a.json: must be an object, got an array"});
}

TEST(JsonFields, OneStyleOverBothDocumentTypes) {
  check_accessors<nlohmann::json>("std::map objects");
  check_accessors<nlohmann::ordered_json>("ordered objects");
  // members() keeps the ordered document's order.
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(R"({"z": 1, "a": 2})");
  std::vector<std::string> keys;
  for (const auto& [key, value] : JsonField(doc, "o.json").members()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"z", "a"}));
}

// ---- docs/design.md "How to add a JSON field", walked with a document of the test's own ----

// Step 1: the document's one reader fills its struct: the bounded reader (regular file, size cap, depth
// limit), then typed fields. Step 2, the new field: one member and one line in the reader.
struct ClipListing {
  std::string name;
  int64_t frames = 0;
  int64_t fps = 30;  // the new field: optional, 30 when absent
};

ClipListing read_clip_listing(const std::string& path) {
  const nlohmann::ordered_json document = read_json_file(path, "clip listing");
  const JsonField doc = JsonField(document, path).object();
  ClipListing listing;
  listing.name = doc.at("name").string();
  listing.frames = doc.at("frames").integer(1);
  listing.fps = doc.at("fps").integer_or(listing.fps, 1, 240);
  return listing;
}

TEST(JsonFields, HowToAddAJsonField) {
  const TempDir dir("json_how_to");
  const std::string path = dir.file("clip.json");
  write_text(path, R"({"name": "walk", "frames": 90})");
  EXPECT_EQ(read_clip_listing(path).fps, 30);  // files written before the field keep reading
  write_text(path, R"({"name": "walk", "frames": 90, "fps": 60})");
  EXPECT_EQ(read_clip_listing(path).fps, 60);
  // Step 3: bad values are refused in the one style, naming the file and the field.
  write_text(path, R"({"name": "walk", "frames": 90, "fps": "60"})");
  expect_field_error([&] { read_clip_listing(path); }, {path + ": field 'fps' must be an integer in [1, 240], "
                                                               "got a string (\"60\")"});
  write_text(path, R"({"name": "walk", "frames": 90, "fps": 0})");
  expect_field_error([&] { read_clip_listing(path); }, {path + ": field 'fps' must be an integer in [1, 240]"});
  // And the reader's bounds hold for the new document as for every other.
  write_text(path, std::string(1000, '[') + std::string(1000, ']'));
  expect_field_error([&] { read_clip_listing(path); }, {path + ": JSON nested deeper than 64 levels"});
}

// ---- the readers of a pipeline folder ----

fs::path fresh_pipeline(const TempDir& root, const std::string& name) {
  const fs::path dir = fs::path(root.path()) / name;
  fs::remove_all(dir);
  fs::copy(std::string(ZEST_TEST_DATA) + "/sd_tiny/sd15", dir, fs::copy_options::recursive);
  return dir;
}

// `file` parsed ({} when there is none), changed by `edit`, written back.
void edit_json_file(const fs::path& file, const std::function<void(nlohmann::ordered_json&)>& edit) {
  nlohmann::ordered_json doc =
      fs::exists(file) ? nlohmann::ordered_json::parse(read_text(file.string())) : nlohmann::ordered_json::object();
  edit(doc);
  write_text(file.string(), doc.dump());
}

struct FieldCase {
  std::string file;  // relative to the pipeline folder
  std::function<void(nlohmann::ordered_json&)> edit;
  std::vector<std::string> parts;  // what the message says besides the file
};

TEST(JsonFields, PipelineFolderReadersNameFileAndField) {
  const TempDir root("json_fields_pipeline");
  const auto text_encoder = [](const fs::path& dir) { clip::load_clip_text_model(dir / "text_encoder"); };
  const auto tokenizer = [](const fs::path& dir) { clip::CLIPTokenizer::from_folder(dir / "tokenizer"); };
  const auto vae_reader = [](const fs::path& dir) { vae::load_autoencoder_kl(dir / "vae"); };
  const auto scheduler = [](const fs::path& dir) { unet::SchedulerConfig::from_file(dir / "scheduler/scheduler_config.json"); };
  const auto pipeline = [](const fs::path& dir) { load_sd_pipeline(dir, WeightsSource{}, torch::kCPU, torch::kFloat32); };
  const std::vector<std::pair<FieldCase, std::function<void(const fs::path&)>>> cases = {
      // text_encoder/config.json: wrong type, out of range, a name not in the list, a whole CLIPModel's text_config
      {{"text_encoder/config.json", [](auto& d) { d["num_hidden_layers"] = "2"; },
        {"field 'num_hidden_layers' must be an integer in [1, 256], got a string (\"2\")"}}, text_encoder},
      {{"text_encoder/config.json", [](auto& d) { d["hidden_size"] = int64_t{1} << 40; },
        {"field 'hidden_size' must be an integer in [1, 16384], got an integer (1099511627776)"}}, text_encoder},
      {{"text_encoder/config.json", [](auto& d) { d["hidden_act"] = "relu"; },
        {"field 'hidden_act' must be one of \"quick_gelu\", \"gelu\", \"gelu_new\" or \"gelu_pytorch_tanh\", got a string (\"relu\")"}},
       text_encoder},
      {{"text_encoder/config.json", [](auto& d) { d["architectures"] = {"BertModel"}; },
        {"field 'architectures[0]' must be one of \"CLIPTextModel\" or \"CLIPTextModelWithProjection\""}}, text_encoder},
      {{"text_encoder/config.json", [](auto& d) { d = {{"model_type", "clip"}}; },
        {"field 'text_config' is missing (expected an object)"}}, text_encoder},
      {{"text_encoder/config.json", [](auto& d) { d = {{"model_type", "clip"}, {"text_config", {{"hidden_size", -1}}}}; },
        {"field 'text_config.hidden_size' must be an integer in [1, 16384], got an integer (-1)"}}, text_encoder},
      // tokenizer files
      {{"tokenizer/vocab.json", [](auto& d) { d["a</w>"] = "one"; },
        {"field '[\"a</w>\"]' must be an integer >= 0, got a string (\"one\")"}}, tokenizer},
      {{"tokenizer/vocab.json", [](auto& d) { d = nlohmann::ordered_json::array(); },
        {"vocab.json: must be an object mapping each token to its id, got an array"}}, tokenizer},
      {{"tokenizer/tokenizer_config.json", [](auto& d) { d["model_max_length"] = 1; },
        {"field 'model_max_length' must be an integer in [2, 1000000], got an integer (1)"}}, tokenizer},
      {{"tokenizer/special_tokens_map.json", [](auto& d) { d["bos_token"] = 5; },
        {"field 'bos_token' must be a string or {\"content\": ...}, got an integer (5)"}}, tokenizer},
      {{"tokenizer/special_tokens_map.json", [](auto& d) { d["eos_token"] = {{"normalized", true}}; },
        {"field 'eos_token.content' is missing (expected a string)"}}, tokenizer},
      {{"tokenizer/special_tokens_map.json", [](auto& d) { d["eos_token"] = {{"content", "<|endoftext|>"}, {"normalized", "no"}}; },
        {"field 'eos_token.normalized' must be true or false, got a string"}}, tokenizer},
      // vae/config.json
      {{"vae/config.json", [](auto& d) { d["layers_per_block"] = 2.0; },
        {"field 'layers_per_block' must be an integer in [1, 64], got a number with a fraction (2.0)"}}, vae_reader},
      {{"vae/config.json", [](auto& d) { d["block_out_channels"] = {8, -8}; },
        {"field 'block_out_channels[1]' must be an integer in [1, 16384], got an integer (-8)"}}, vae_reader},
      {{"vae/config.json", [](auto& d) { d["up_block_types"] = {"UpDecoderBlock2D"}; },
        {"field 'up_block_types' must be an array of 2 times \"UpDecoderBlock2D\""}}, vae_reader},
      {{"vae/config.json", [](auto& d) { d["force_upcast"] = "true"; },
        {"field 'force_upcast' must be true or false, got a string (\"true\")"}}, vae_reader},
      // scheduler/scheduler_config.json (a null is None there: the default)
      {{"scheduler/scheduler_config.json", [](auto& d) { d["beta_schedule"] = "squaredcos_cap_v2"; },
        {"field 'beta_schedule' must be one of \"scaled_linear\" or \"linear\", got a string (\"squaredcos_cap_v2\")"}},
       scheduler},
      {{"scheduler/scheduler_config.json", [](auto& d) { d["num_train_timesteps"] = 1; },
        {"field 'num_train_timesteps' must be an integer in [2, 100000], got an integer (1)"}}, scheduler},
      {{"scheduler/scheduler_config.json", [](auto& d) { d["beta_end"] = true; },
        {"field 'beta_end' must be a finite number in (0, 1), got a boolean (true)"}}, scheduler},
      {{"scheduler/scheduler_config.json", [](auto& d) { d["lambda_min_clipped"] = {{"x", 1}}; },
        {"field 'lambda_min_clipped' must be -inf (zest supports only -inf), got an object"}}, scheduler},
      // model_index.json
      {{"model_index.json", [](auto& d) { d["force_zeros_for_empty_prompt"] = "yes"; },
        {"field 'force_zeros_for_empty_prompt' must be true or false, got a string (\"yes\")"}}, pipeline},
  };
  for (const auto& [c, read] : cases) {
    SCOPED_TRACE(c.file + ": " + c.parts.front());
    const fs::path dir = fresh_pipeline(root, "p");
    edit_json_file(dir / c.file, c.edit);
    std::vector<std::string> parts = c.parts;
    parts.push_back((dir / c.file).string() + ": ");
    expect_field_error([&] { read(dir); }, parts);
  }
  {  // a null stands for None in the scheduler's file, and the copy as given still reads
    const fs::path dir = fresh_pipeline(root, "p");
    edit_json_file(dir / "scheduler/scheduler_config.json", [](auto& d) { d["beta_schedule"] = nullptr; });
    EXPECT_EQ(unet::SchedulerConfig::from_file(dir / "scheduler/scheduler_config.json").beta_schedule, "linear");
  }
  {  // tokenizer.json in place of vocab.json + merges.txt
    const fs::path dir = fresh_pipeline(root, "p");
    fs::remove(dir / "tokenizer/vocab.json");
    write_text((dir / "tokenizer/tokenizer.json").string(),
               R"({"model": {"type": "WordPiece", "vocab": {"a": 0}, "merges": ["a b"]}})");
    expect_field_error([&] { tokenizer(dir); },
                       {"tokenizer/tokenizer.json: field 'model.type' must be \"BPE\", got a string (\"WordPiece\")"});
    write_text((dir / "tokenizer/tokenizer.json").string(), R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a"]]}})");
    expect_field_error([&] { tokenizer(dir); }, {"field 'model.merges[0]' must be a merge \"first second\" or [first, second]"});
  }
}

// ---- the Qwen files ----

TEST(JsonFields, QwenFilesNameFileAndField) {
  const TempDir root("json_fields_qwen");
  auto tokenizer_with = [&](const std::function<void(nlohmann::json&)>& edit) {
    const fs::path dir = fs::path(root.path()) / "tok";
    fs::create_directories(dir);
    nlohmann::json doc = hytext::test::tiny_qwen_tokenizer_json();
    edit(doc);
    write_text((dir / "tokenizer.json").string(), doc.dump());
    fs::remove(dir / "tokenizer_config.json");
    return [dir] { qwen3::QwenTokenizer::from_folder(dir); };
  };
  EXPECT_NO_THROW(tokenizer_with([](nlohmann::json&) {})());
  expect_field_error(tokenizer_with([](nlohmann::json& d) { d["added_tokens"][1]["id"] = -1; }),
                     {"tok/tokenizer.json: field 'added_tokens[1].id' must be an integer in [0, 2147483647], got an integer (-1)"});
  expect_field_error(tokenizer_with([](nlohmann::json& d) { d["model"]["vocab"]["a"] = "x"; }),
                     {"field 'model.vocab.a' must be an integer in [0, 2147483647], got a string"});
  expect_field_error(tokenizer_with([](nlohmann::json& d) { d["model"]["merges"][0] = 3; }),
                     {"field 'model.merges[0]' must be a pair of tokens or \"first second\", got an integer (3)"});
  expect_field_error(tokenizer_with([](nlohmann::json& d) { d["model"].erase("vocab"); }),
                     {"field 'model.vocab' is missing (expected an object of token"});
  expect_field_error(tokenizer_with([](nlohmann::json& d) { d["added_tokens"][0]["special"] = "yes"; }),
                     {"field 'added_tokens[0].special' must be true or false, got a string"});
  {  // tokenizer_config.json's pad_token
    const fs::path dir = fs::path(root.path()) / "pad";
    fs::create_directories(dir);
    write_text((dir / "tokenizer.json").string(), hytext::test::tiny_qwen_tokenizer_json().dump());
    write_text((dir / "tokenizer_config.json").string(), R"({"pad_token": {"content": 7}})");
    expect_field_error([&] { qwen3::QwenTokenizer::from_folder(dir); },
                       {"pad/tokenizer_config.json: field 'pad_token.content' must be a string, got an integer (7)"});
  }
  // config.json
  const nlohmann::json good = {{"model_type", "qwen3"}, {"hidden_size", 32}, {"num_attention_heads", 4}, {"head_dim", 8}};
  EXPECT_NO_THROW(qwen3::Qwen3Config::from_json_text(good.dump(), "Q/config.json"));
  auto config_with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json c = good;
    c[key] = value;
    return [c] { qwen3::Qwen3Config::from_json_text(c.dump(), "Q/config.json"); };
  };
  expect_field_error(config_with("num_hidden_layers", "two"), {"Q/config.json: field 'num_hidden_layers' must be an integer in [1, 1024], got a string"});
  expect_field_error(config_with("rms_norm_eps", 2), {"Q/config.json: field 'rms_norm_eps' must be a finite number in (0, 1], got an integer (2)"});
  expect_field_error(config_with("rope_parameters", {{"rope_theta", "big"}}), {"field 'rope_parameters.rope_theta' must be a finite number"});
  expect_field_error(config_with("tie_word_embeddings", 1), {"field 'tie_word_embeddings' must be true or false"});
}

// ---- index files, dataset listings, metadata.jsonl ----

TEST(JsonFields, IndexDatasetAndMetadataNameFileAndField) {
  const TempDir root("json_fields_data");
  {  // a safetensors index
    const std::string index = root.sub("model.safetensors.index.json");
    auto open_index = [&] { PretrainedWeights::open(find_pretrained_layout(index)); };
    write_text(index, R"({"metadata": {}, "weight_map": {"conv_in.weight": 5}})");
    expect_field_error(open_index, {index + ": field 'weight_map[\"conv_in.weight\"]' must be a string, got an integer (5)"});
    write_text(index, R"({"metadata": {}})");
    expect_field_error(open_index, {index + ": field 'weight_map' is missing (expected an object of strings)"});
  }
  {  // dataset.json (no shard is opened: the listing is refused first)
    const std::string dir = root.sub("dataset");
    const std::string file = dir + "/dataset.json";
    const nlohmann::ordered_json good = {
        {"format", "zest.motion.v1"},
        {"features", {{"motion_dim", 12}, {"text_tokens", 8}, {"text_dim", 16}, {"pooled_dim", 4}}},
        {"shards", {{{"file", "shard-00000.safetensors"}, {"samples", 4}}}}};
    auto with = [&](const std::function<void(nlohmann::ordered_json&)>& edit) {
      nlohmann::ordered_json doc = good;
      edit(doc);
      write_text(file, doc.dump());
      return [dir] { read_manifest(dir); };
    };
    EXPECT_NO_THROW(with([](nlohmann::ordered_json&) {})());
    expect_field_error(with([](auto& d) { d["format"] = "zest.motion.v9"; }),
                       {file + ": field 'format' must be one of \"zest.motion.v1\" or \"zest.latents.v1\", got a string (\"zest.motion.v9\")"});
    expect_field_error(with([](auto& d) { d.erase("format"); }), {file + ": field 'format' is missing"});
    expect_field_error(with([](auto& d) { d["features"]["text_dim"] = "16"; }),
                       {file + ": field 'features.text_dim' must be an integer <= 16777216, got a string (\"16\")"});
    expect_field_error(with([](auto& d) { d["features"]["motion_dim"] = 0; }),
                       {file + ": field 'features.motion_dim' must be an integer in [1, 16777216], got an integer (0)"});
    expect_field_error(with([](auto& d) { d["features"].erase("text_dim"); }),
                       {file + ": field 'features.text_dim' is missing (zest.motion.v1 needs it)"});
    expect_field_error(with([](auto& d) { d["shards"][0]["samples"] = 0; }),
                       {file + ": field 'shards[0].samples' must be an integer in [1, 4294967296], got an integer (0)"});
    expect_field_error(with([](auto& d) { d["shards"][0]["height"] = 8; }),
                       {file + ": field 'shards[0]' gives only one of \"height\" and \"width\""});
    expect_field_error(with([](auto& d) { d["shards"][0]["file"] = nullptr; }),
                       {file + ": field 'shards[0].file' must be a string, got null"});
    expect_field_error(with([](auto& d) { d["stats"] = 3; }), {file + ": field 'stats' must be a string, got an integer (3)"});
    expect_field_error(with([](auto& d) { d["shards"] = nlohmann::ordered_json::array(); }),
                       {file + ": field 'shards' must be a non-empty array of {\"file\": ..., \"samples\": ...}, got an array"});
  }
  {  // metadata.jsonl: a line with a bad field is skipped with the one-style reason
    const fs::path images = fs::path(root.path()) / "images";
    fs::create_directories(images);
    write_png(images / "a.png", 8, 8, 1);
    write_png(images / "b.png", 8, 8, 2);
    write_png(images / "c.png", 8, 8, 3);
    write_text((images / "metadata.jsonl").string(),
               "{\"file_name\": \"a.png\", \"text\": \"a cat\"}\n{\"file_name\": 5, \"text\": \"x\"}\n"
               "{\"file_name\": \"b.png\", \"text\": {\"en\": \"x\"}}\n{\"file_name\": \"c.png\", \"text\": [7]}\n");
    const ImageFolderListing listing = list_image_folder(images.string());
    ASSERT_EQ(listing.images.size(), 1u);
    std::map<std::string, std::string> reasons;
    for (const SkippedFile& s : listing.skipped) reasons[s.file] = s.reason;
    const std::string path = (images / "metadata.jsonl").string();
    EXPECT_NE(reasons["metadata.jsonl line 2"].find(path + " line 2: field 'file_name' must be a string, got an integer (5)"),
              std::string::npos) << reasons["metadata.jsonl line 2"];
    EXPECT_NE(reasons["metadata.jsonl line 3"].find(path + " line 3: field 'text' must be a string or a non-empty array of "
                                                    "strings, got an object"),
              std::string::npos) << reasons["metadata.jsonl line 3"];
    EXPECT_NE(reasons["metadata.jsonl line 4"].find(path + " line 4: field 'text[0]' must be a string, got an integer (7)"),
              std::string::npos) << reasons["metadata.jsonl line 4"];
  }
}

// ---- the checkpoint's own records, read as their readers read them ----

TEST(JsonFields, CheckpointRecordsNameTheManifestAndField) {
  auto extra = [](const std::string& text) { return checkpoint::extra_record(text, "ckpt/step_00000002/manifest.json"); };
  expect_field_error([&] { extra("[1]"); }, {"ckpt/step_00000002/manifest.json: field 'extra' must be an object, got an array"});
  expect_field_error([&] { extra("{\"data\": "); }, {"ckpt/step_00000002/manifest.json (extra): not valid JSON"});
  const JsonDocument lora = extra(R"({"lora": {"rank": "2", "alpha": 4, "layers": ["a"]}})");
  expect_field_error([&] { LoraRecord::from_json(lora.root().at("lora")); },
                     {"ckpt/step_00000002/manifest.json: field 'extra.lora.rank' must be an integer >= 1, got a string (\"2\")"});
  const JsonDocument no_layers = extra(R"({"lora": {"rank": 2, "alpha": 4, "layers": []}})");
  expect_field_error([&] { LoraRecord::from_json(no_layers.root().at("lora")); }, {"field 'extra.lora.layers' is empty"});
  const JsonDocument good = extra(R"({"lora": {"rank": 2, "alpha": 4, "dropout": 0.1, "layers": ["a", "b"]}})");
  const LoraRecord record = LoraRecord::from_json(good.root().at("lora"));
  EXPECT_EQ(record.rank, 2);
  EXPECT_EQ(record.layers.size(), 2u);
  EXPECT_EQ(record.seed, 0);
  const JsonDocument source = extra(R"({"model_source": {"family": "unet", "format": "diffusers"}})");
  expect_field_error([&] { check_model_source_record(source.root().at("model_source")); },
                     {"field 'extra.model_source.config_text' is missing (expected a string)"});
  const JsonDocument family = extra(R"({"model_source": {"family": ["unet"], "format": "zest"}})");
  expect_field_error([&] { check_model_source_record(family.root().at("model_source")); },
                     {"field 'extra.model_source.family' must be a string, got an array"});
}

}  // namespace
}  // namespace zest::testing
