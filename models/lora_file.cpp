// LoRA files and the exports of LoRA checkpoints (see lora_file.h).
#include "models/lora_file.h"

#include "checkpoint/directory.h"
#include "checkpoint/manifest.h"
#include "core/check.h"
#include "formats/json_field.h"
#include "formats/json_text.h"
#include "formats/safetensors.h"
#include "models/pretrained_load.h"
#include "models/pretrained_source.h"
#include "models/registry.h"

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <random>

namespace zest {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMetadataKey = "lora_adapter_metadata";  // diffusers' LORA_ADAPTER_METADATA_KEY
constexpr const char* kDownSuffix = ".lora_A.weight";
constexpr const char* kUpSuffix = ".lora_B.weight";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The checkpoint's own record (manifest "extra"): errors name step_dir/manifest.json and the field.
JsonDocument extra_of(const checkpoint::Manifest& manifest, const std::string& step_dir) {
  return checkpoint::extra_record(manifest.extra_json, (fs::path(step_dir) / checkpoint::kManifestName).string());
}

std::string family_of_checkpoint(const checkpoint::Manifest& manifest, const std::string& step_dir) {
  const JsonDocument extra = extra_of(manifest, step_dir);
  const JsonField source = extra.root().null_as_absent().at("model_source");
  if (source.exists()) {
    check_model_source_record(source);
    return source.at("family").string();
  }
  for (const BuiltinModelConfig& builtin : builtin_model_configs())
    if (builtin.name == manifest.model_name) return builtin.family;
  throw Error(str(step_dir, ": cannot tell the model family of '", manifest.model_name, "'"));
}

// A file in the system's temporary folder, removed when this goes out of scope.
class TemporaryFile {
 public:
  TemporaryFile() {
    std::random_device random;
    path_ = (fs::temp_directory_path() / ("zest-lora-" + std::to_string(random()) + ".safetensors")).string();
  }
  ~TemporaryFile() {
    std::error_code ignored;
    fs::remove(path_, ignored);
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The adapters of a LoRA checkpoint as a LoRA file at `out` (peft's names and metadata).
checkpoint::MergeResult write_lora_file(const std::string& step_dir, const std::string& out,
                                        checkpoint::MergeOptions options) {
  const checkpoint::Manifest manifest = checkpoint::read_manifest(step_dir);
  const LoraRecord record = lora_record_of_checkpoint(step_dir);
  const std::string family = family_of_checkpoint(manifest, step_dir);
  options.name_prefix = lora_name_prefix(family);
  options.extra_metadata = lora_file_metadata(family, record);
  return checkpoint::merge_offline(step_dir, out, options);
}

// peft's LoraConfig fields as the metadata holds them (diffusers strips the prefix); an absent or
// unreadable entry gives alpha = rank (the convention of files without one).
struct FileConfig {
  std::optional<double> alpha;
  std::map<std::string, double> alpha_pattern;
};

FileConfig file_config(const safetensors::Metadata& metadata, const std::string& prefix, const std::string& path) {
  FileConfig config;
  const auto it = metadata.find(kMetadataKey);
  if (it == metadata.end()) return config;
  const nlohmann::json json = parse_json(it->second, path + ": metadata " + kMetadataKey);
  const JsonField root(json, path + ": metadata " + kMetadataKey);
  // peft writes more fields than these; other files' values of other types are passed over.
  for (const auto& [key, value] : root.object().members()) {
    const std::string field = key.rfind(prefix, 0) == 0 ? key.substr(prefix.size()) : key;
    if (field == "lora_alpha" && value.is_number()) config.alpha = value.number();
    if (field == "alpha_pattern" && value.is_object()) {
      for (const auto& [pattern, alpha] : value.members())
        if (alpha.is_number()) config.alpha_pattern[pattern] = alpha.number();
    }
  }
  return config;
}

struct FilePair {
  std::string down, up;  // stored names
};

// The file's layers (names without prefix) → their two stored tensors; every refusal names the file.
std::map<std::string, FilePair> layers_of(const safetensors::Reader& reader, const std::string& prefix) {
  std::map<std::string, FilePair> layers;
  std::vector<std::string> foreign;
  for (const safetensors::TensorInfo& t : reader.tensors()) {
    const bool prefixed = prefix.empty() || t.name.rfind(prefix, 0) == 0;
    const std::string name = prefixed ? t.name.substr(prefix.size()) : t.name;
    if (ends_with(name, kDownSuffix)) {
      layers[name.substr(0, name.size() - std::string(kDownSuffix).size())].down = t.name;
    } else if (ends_with(name, kUpSuffix)) {
      layers[name.substr(0, name.size() - std::string(kUpSuffix).size())].up = t.name;
    } else {
      foreign.push_back(t.name);
    }
    if (!prefixed) foreign.push_back(t.name);
  }
  if (!foreign.empty()) throw Error(str(reader.path(), ": not a LoRA file of this model in peft/diffusers naming (\"",
             prefix, "<layer>.lora_A.weight\" / \".lora_B.weight\"): ", foreign.size(), " tensor(s) such as ",
             foreign.front()));
  if (layers.empty()) throw Error(str(reader.path(), ": holds no LoRA tensors"));
  for (const auto& [layer, pair] : layers)
    if (pair.down.empty() || pair.up.empty()) throw Error(str(reader.path(), ": layer ", layer, " has only its ",
               pair.down.empty() ? "lora_B" : "lora_A", " factor"));
  return layers;
}

double alpha_for(const FileConfig& config, const std::string& layer, int64_t rank) {
  for (const auto& [pattern, alpha] : config.alpha_pattern)
    if (target_matches(pattern.rfind('^', 0) == 0 ? pattern.substr(1) : pattern, layer)) return alpha;
  return config.alpha.value_or(static_cast<double>(rank));
}

// Whether a file's factors go into new adapters (load_lora) or into the ones a file of the same layers put
// there before (load_lora_values).
enum class AdapterValues { attach, replace };

// Every refusal of load_lora_file, made before the first adapter is attached or changed.
void check_file_fits(const safetensors::Reader& reader, const std::string& family,
                     const std::map<std::string, FilePair>& layers, const FileConfig& config,
                     const std::map<std::string, AdaptableLayer>& by_name, AdapterValues values) {
  const std::string& path = reader.path();
  for (const auto& [name, pair] : layers) {
    const auto it = by_name.find(name);
    if (it == by_name.end()) throw Error(str(path, ": a LoRA file for another model: this ", family, " model has no layer ",
               name));
    const auto& down = reader.info(pair.down).shape;
    const auto& up = reader.info(pair.up).shape;
    const AdaptableLayer& layer = it->second;
    const size_t dims = layer.is_conv ? 4 : 2;
    const bool fits = down.size() == dims && up.size() == dims && down[0] == up[1] && down[1] == layer.in &&
                      up[0] == layer.out && down[0] >= 1 && (!layer.is_conv || (up[2] == 1 && up[3] == 1));
    if (!fits) throw Error(str(path, ": a LoRA file for another model: the factors of ", name, " do not fit its ",
               layer.in, " → ", layer.out, layer.is_conv ? " convolution" : " Linear"));
    const LowRankAdapter* adapter = layer.adapter();
    if (values == AdapterValues::attach && adapter != nullptr)
      throw Error(str(path, ": layer ", name, " already has an adapter"));
    if (values == AdapterValues::replace &&
        (adapter == nullptr || adapter->rank() != down[0] || adapter->alpha() != alpha_for(config, name, down[0])))
      throw Error(str(path, ": layer ", name, adapter == nullptr ? " has no adapter" : " has an adapter of another rank or alpha",
                      " (a LoRA file of the same layers, ranks and alphas replaces another's values)"));
  }
  if (values == AdapterValues::replace) {
    int64_t adapted = 0;
    for (const auto& [name, layer] : by_name) adapted += layer.adapter() != nullptr ? 1 : 0;
    if (adapted != static_cast<int64_t>(layers.size()))
      throw Error(str(path, ": holds ", layers.size(), " adapted layers where the model has ", adapted,
                      " (a LoRA file of the same layers replaces another's values)"));
  }
}

LoadedLora load_lora_file(torch::nn::Module& model, const std::string& family, const std::string& path,
                          double multiplier, AdapterValues values) {
  const safetensors::Reader reader(path);
  const std::string prefix = lora_name_prefix(family);
  const std::map<std::string, FilePair> layers = layers_of(reader, prefix);
  const FileConfig config = file_config(reader.metadata(), prefix, path);
  std::map<std::string, AdaptableLayer> by_name;
  for (const AdaptableLayer& layer : adaptable_layers(model)) by_name.emplace(layer.name, layer);
  check_file_fits(reader, family, layers, config, by_name, values);
  LoadedLora loaded;
  torch::NoGradGuard no_grad;
  for (const auto& [name, pair] : layers) {
    const AdaptableLayer& layer = by_name.at(name);
    const int64_t rank = reader.info(pair.down).shape[0];
    if (values == AdapterValues::attach) layer.attach({rank, alpha_for(config, name, rank), 0.0});
    LowRankAdapter& adapter = *layer.adapter();
    adapter.down().copy_(reader.read(pair.down));  // converted to the layer's dtype and device
    adapter.up().copy_(reader.read(pair.up));
    if (values == AdapterValues::attach) {
      adapter.down().set_requires_grad(false);  // loaded to be used, not trained
      adapter.up().set_requires_grad(false);
      adapter.set_multiplier(multiplier);
    }
    if (loaded.layers == 0) loaded = {0, rank, adapter.alpha()};
    ++loaded.layers;
  }
  return loaded;
}

// A LoRA file from `path` as load_lora takes it (a file, a folder holding kLoraFileName, a LoRA run's
// checkpoint), loaded by `load`.
LoadedLora with_lora_file(const std::string& path, const std::function<LoadedLora(const std::string& file)>& load) {
  if (!fs::exists(path)) throw Error(str(path, ": LoRA file or checkpoint not found"));
  if (fs::is_regular_file(path)) return load(path);
  if (fs::is_regular_file(fs::path(path) / kLoraFileName)) return load((fs::path(path) / kLoraFileName).string());
  const std::string step_dir = checkpoint::resolve_checkpoint(path);
  const TemporaryFile file;
  write_lora_file(step_dir, file.path(), {});
  return load(file.path());
}

}  // namespace

std::string lora_name_prefix(const std::string& family) { return model_family(family).lora_name_prefix; }

std::map<std::string, std::string> lora_file_metadata(const std::string& family, const LoraRecord& record) {
  const std::string p = lora_name_prefix(family).substr(0, lora_name_prefix(family).size() - 1) + ".";
  const nlohmann::json config = {{p + "r", record.rank},
                                 {p + "lora_alpha", record.alpha},
                                 {p + "lora_dropout", record.dropout},
                                 {p + "target_modules", record.layers},
                                 {p + "bias", "none"},
                                 {p + "init_lora_weights", true},
                                 {p + "use_rslora", false},
                                 {p + "use_dora", false}};
  return {{kMetadataKey, config.dump(2)}, {"zest.lora_rank", std::to_string(record.rank)}};
}

bool is_lora_checkpoint(const std::string& step_dir) {
  return extra_of(checkpoint::read_manifest(step_dir), step_dir).root().has("lora");
}

LoraRecord lora_record_of_checkpoint(const std::string& step_dir) {
  const JsonDocument extra = extra_of(checkpoint::read_manifest(step_dir), step_dir);
  if (!extra.root().has("lora")) throw Error(str(step_dir, ": not a checkpoint of a LoRA run (its run had "
             "no [lora] table): it holds the whole model, not adapters"));
  return LoraRecord::from_json(extra.root().at("lora"));
}

LoadedLora load_lora(torch::nn::Module& model, const std::string& family, const std::string& path, double multiplier) {
  return with_lora_file(path, [&](const std::string& file) {
    return load_lora_file(model, family, file, multiplier, AdapterValues::attach);
  });
}

LoadedLora load_lora_values(torch::nn::Module& model, const std::string& family, const std::string& path) {
  return with_lora_file(path, [&](const std::string& file) {
    return load_lora_file(model, family, file, 1.0, AdapterValues::replace);
  });
}

checkpoint::MergeResult export_lora_file(const std::string& ckpt, const std::string& out,
                                         checkpoint::MergeOptions options) {
  const std::string step_dir = checkpoint::resolve_checkpoint(ckpt);
  lora_record_of_checkpoint(step_dir);  // a run without [lora]: refused before anything is written
  if (options.shard_size_bytes != 0) throw Error("--format lora writes one file; leave out --shard-size");
  if (ends_with(out, ".safetensors")) return write_lora_file(step_dir, out, options);
  if (fs::exists(out) && !fs::is_directory(out)) throw Error(str(out, ": --format lora writes a .safetensors file or a folder "
             "(for load_lora_weights(DIR)); this is neither"));
  fs::create_directories(out);
  return write_lora_file(step_dir, (fs::path(out) / kLoraFileName).string(), options);
}

std::shared_ptr<UnitModule> folded_lora_model(const std::string& step_dir, bool ema) {
  const checkpoint::Manifest manifest = checkpoint::read_manifest(step_dir);
  const LoraRecord record = lora_record_of_checkpoint(step_dir);
  const ModelFamily& family = model_family(family_of_checkpoint(manifest, step_dir));
  ConfigTable table = ConfigTable::parse_string(manifest.model_config, step_dir + "/manifest.json (model config)");
  torch::manual_seed(static_cast<uint64_t>(record.seed));  // the trainer's initialisation of the base
  std::shared_ptr<UnitModule> model = family.build(table);
  if (!record.pretrained.empty()) {
    const auto weights = PretrainedWeights::open(find_pretrained_layout(record.pretrained));
    load_pretrained_weights(*model, *weights, /*strict=*/true);
  }
  const TemporaryFile file;
  checkpoint::MergeOptions options;
  options.ema = ema;
  write_lora_file(step_dir, file.path(), options);
  load_lora_file(*model, family.name, file.path(), 1.0, AdapterValues::attach);
  fold_adapters(*model);
  return model;
}

}  // namespace zest
