// docs/design.md "How to add a model family", walked by a test: a family of the test's own (a two-unit
// denoiser of image latents) is filled in as a family's folder would fill it, registered with one line, and
// trained by the real path: a run file naming the family and its model file, `zest train`'s entry
// (parse_run_config + run_training), then `zest merge`'s export to one safetensors file. Also what
// register_model_family refuses, and the one error a family without a sampler gets for [sample]; and step 5,
// a family's pipeline: [sample]'s rounds and `zest sample` drawn by a second test family's own.
#include "common/error_of.h"
#include "common/keep_thread_count.h"
#include "common/temp_dir.h"
#include "core/check.h"
#include "core/config_reader.h"
#include "data/model_features.h"
#include "data/synth.h"
#include "formats/safetensors.h"
#include "models/model_export.h"
#include "models/model_resolve.h"
#include "models/registry.h"
#include "pipelines/family_pipeline.h"
#include "pipelines/sample_run.h"
#include "train/run_config.h"
#include "train/trainer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <map>
#include <memory>
#include <string>

// ----------------------------------------------------------------------------------------------------
// Step 1: the family's folder (models/<family>/ in the tree; here, this namespace). Its configuration, its
// model (a UnitModule: units declared, each run through run_unit) and family(), which fills ModelFamily.

namespace zest::toylatent {
namespace {

// The model file's keys; unknown keys are errors, as the built-in families' are.
struct ToyLatentConfig {
  int64_t channels = 4;  // latent channels
  int64_t text_dim = 8;  // width of the text features

  static ToyLatentConfig from_toml(ConfigTable& t) {
    ToyLatentConfig c;
    c.channels = t.get<int64_t>("channels", c.channels);
    c.text_dim = t.get<int64_t>("text_dim", c.text_dim);
    if (c.channels < 1) t.fail("channels", "must be >= 1");
    if (c.text_dim < 1) t.fail("text_dim", "must be >= 1");
    t.reject_unknown_keys();
    return c;
  }
};

// Predicts the flow velocity (noise − latents) of noisy latents from a per-pixel channel mix plus the
// mean text feature projected onto the channels: two units, "cond" and "mix".
class ToyLatentModel : public UnitModule {
 public:
  explicit ToyLatentModel(const ToyLatentConfig& c) {
    cond = register_module("cond", torch::nn::Linear(c.text_dim, c.channels));
    mix = register_module("mix", torch::nn::Linear(c.channels, c.channels));
  }

  std::vector<UnitDecl> unit_decls() const override { return {{"cond", {"cond."}}, {"mix", {"mix."}}}; }

  // sample [B, C, H, W], text [B, T, D] → [B, C, H, W].
  torch::Tensor forward(const torch::Tensor& sample, const torch::Tensor& text) {
    const auto dtype = mix->weight.scalar_type();
    const auto bias = run_unit("cond", [&](const Tensors& in) { return Tensors{cond->forward(in[0].mean(1))}; },
                               {text.to(dtype)})[0];
    return run_unit("mix", [&](const Tensors& in) {
             const auto mixed = mix->forward(in[0].permute({0, 2, 3, 1})).permute({0, 3, 1, 2});
             return Tensors{mixed + in[1].unsqueeze(-1).unsqueeze(-1)};
           }, {sample.to(dtype), bias})[0];
  }

  torch::nn::Linear cond{nullptr}, mix{nullptr};
};

const torch::Tensor& batch_input(const TensorMap& batch, const std::string& key) {
  const auto it = batch.find(key);
  ZEST_CHECK(it != batch.end(), "toy latent model: input '", key, "' is missing");
  return it->second;
}

ToyLatentModel& toy_model(UnitModule& model) {
  auto* toy = dynamic_cast<ToyLatentModel*>(&model);
  ZEST_CHECK(toy != nullptr, "toy latent model: called on a model of another family");
  return *toy;
}

// Flow matching on the latents dataset's batch keys (docs/data_formats.md): x_t = (1 − t)·x0 + t·ε.
torch::Tensor training_loss(UnitModule& model, const TensorMap& batch, torch::Generator& generator) {
  const torch::Tensor& x0 = batch_input(batch, "sample");
  const auto noise = torch::randn(x0.sizes(), generator, x0.options());
  const auto t = torch::rand({x0.size(0), 1, 1, 1}, generator, x0.options());
  const auto prediction = toy_model(model).forward((1 - t) * x0 + t * noise, batch_input(batch, "encoder_hidden_states"));
  return torch::mse_loss(prediction.to(torch::kFloat32), noise - x0);
}

// The latents dataset's features: what the model fixes (channels, text width, no pooled text or time ids)
// and what it leaves open (tokens, latent side), small so that a CPU trains it in a second.
DatasetFeatures dataset_features(ConfigTable& table, const std::string&) {
  const auto c = ToyLatentConfig::from_toml(table);
  DatasetFeatures features;
  features.format = "latents";
  features.features = {{"channels", c.channels}, {"text_dim", c.text_dim}, {"pooled_dim", 0}, {"time_ids", 0}};
  features.defaults = {{"text_tokens", 4}, {"height", 4}, {"width", 4}};
  return features;
}

ModelFamily family() {
  ModelFamily f;
  f.name = "toylatent";
  f.build = [](ConfigTable& table) -> std::shared_ptr<UnitModule> {
    return std::make_shared<ToyLatentModel>(ToyLatentConfig::from_toml(table));
  };
  f.count_parameters = [](ConfigTable& table) {
    const auto c = ToyLatentConfig::from_toml(table);
    return (c.text_dim + 1) * c.channels + (c.channels + 1) * c.channels;
  };
  f.forward = [](UnitModule& model, const TensorMap& inputs) {
    return toy_model(model).forward(batch_input(inputs, "sample"), batch_input(inputs, "encoder_hidden_states"));
  };
  f.training_loss = training_loss;
  f.make_training_loss = [](const LossConfig&, const std::string&) {
    return TrainingObjective{training_loss, "toy flow matching (velocity noise − latents)"};
  };
  f.dataset_features = dataset_features;
  return f;
}

// ----------------------------------------------------------------------------------------------------
// Step 5 (optional): the family's pipeline (pipelines/<family>_samples.cpp in the tree). Registered for a
// second test family, "toysampled" (the same model under another name), so that "toylatent" stays a family
// without one. Its "drawings" are text files: each tensor of the weights it draws with (name and mean) and
// the prompt, so that a test sees which weights reached it.

std::string toy_drawing(const std::string& weights_file, const std::string& prompt) {
  const safetensors::Reader weights(weights_file);
  std::ostringstream out;
  for (const auto& info : weights.tensors())
    out << info.name << " " << weights.read(info.name).mean().item<double>() << "\n";
  out << "prompt: " << prompt << "\n";
  return out.str();
}

class ToyValidation final : public ValidationDrawer {
 public:
  explicit ToyValidation(SampleConfig config) : config_(std::move(config)) {}

  ValidationFiles draw(const ValidationWeights& weights, const torch::Device&, int64_t step,
                       const std::filesystem::path& folder, nlohmann::json& listed) override {
    ValidationFiles written;
    for (size_t i = 0; i < config_.prompts.size(); ++i) {
      const auto path = folder / ("step_" + std::to_string(step) + "_prompt_" + std::to_string(i) + ".txt");
      std::ofstream(path) << toy_drawing(weights.file, config_.prompts[i]);
      written.files.push_back(path.string());
      written.pictures_by_prompt.push_back({});
      listed.push_back({{"prompt", config_.prompts[i]}, {"file", "samples/" + path.filename().string()}});
    }
    return written;
  }

  std::string file_noun() const override { return "drawing"; }

 private:
  SampleConfig config_;
};

FamilyPipeline pipeline() {
  FamilyPipeline p;
  p.family = "toysampled";
  p.owns_folder = [](const std::filesystem::path& folder) { return std::filesystem::exists(folder / "toy_pipeline.txt"); };
  p.sample = [](const SampleOptions& args) {
    std::ofstream(args.output) << toy_drawing(args.weights.weights_file, args.prompt);
  };
  p.validation = [](const SampleConfig& config, const ModelSelection&, const LossConfig&) {
    return std::make_unique<ToyValidation>(config);
  };
  return p;
}

}  // namespace
}  // namespace zest::toylatent

namespace zest::family_test {
namespace {

namespace fs = std::filesystem;
using zest::testing::error_of;
using zest::testing::KeepThreadCount;
using zest::testing::TempDir;

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A run file as a user writes one: [model] names the family and its model file (beside the run file; the
// data and run folders are absolute, as they are read against the working directory).
std::string write_run_file(const TempDir& dir, const std::string& extra = "", const std::string& family = "toylatent") {
  write_file(dir.sub(family + "_small.toml"), "channels = 4\ntext_dim = 6\n");
  const std::string run_file = dir.sub("run.toml");
  write_file(run_file, "[model]\nconfig = \"" + family + "_small.toml\"\nfamily = \"" + family + "\"\n"
                       "[data]\ndir = \"" + dir.sub("data") + "\"\nbatch_size = 4\nnum_workers = 1\n"
                       "[engine]\ndevice = \"cpu\"\nprecision = \"fp32\"\nstage = 2\n"
                       "[optimizer]\nlr = 0.05\n"
                       "[train]\nmax_steps = 6\nlog_every = 1\nrun_dir = \"" + dir.sub("run") + "\"\n"
                       "[checkpoint]\nevery_steps = 3\n" + extra);
  return run_file;
}

std::vector<double> logged_losses(const std::string& metrics) {
  std::vector<double> losses;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.contains("loss")) losses.push_back(record.at("loss").get<double>());
  }
  return losses;
}

// Step 2: the one registration line. A program registers its families at start-up, before anything looks
// one up; this test process registers the test's family once, on first use.
const ModelFamily& toy_family() {
  [[maybe_unused]] static const bool registered = (register_model_family(toylatent::family()), true);
  return model_family("toylatent");
}

// `zest data synth` for the run's model: the family's dataset kind and widths.
void synthesize_data(const RunConfig& config) {
  SynthOptions synth;
  synth.samples = 16;
  synthesize_dataset(config.data.dir, model_features(resolve_run_model(config)), synth);
}

TEST(ModelFamilies, HowToAddAModelFamily) {
  EXPECT_EQ(toy_family().name, "toylatent");
  const KeepThreadCount threads;
  TempDir dir("add_a_family");
  const RunConfig config = parse_run_config(write_run_file(dir));
  synthesize_data(config);

  // The first weights, built as the trainer builds them (the run's seed, then the family's build).
  std::map<std::string, torch::Tensor> initial;
  torch::manual_seed(config.train.seed);
  for (const auto& item : build_model(resolve_run_model(config))->named_parameters())
    initial[item.key()] = item.value().detach().clone();

  // `zest train run.toml`: the family's model, trained as every model is.
  const TrainOutcome outcome = run_training(config, TrainOptions{});
  EXPECT_EQ(outcome.final_step, 6);
  const std::vector<double> losses = logged_losses(dir.sub("run") + "/metrics.jsonl");
  ASSERT_EQ(losses.size(), 6u);
  for (double loss : losses) EXPECT_TRUE(std::isfinite(loss)) << loss;

  // `zest merge run/checkpoints -o model.safetensors`: the model's own names, trained values.
  const std::string merged = dir.sub("model.safetensors");
  export_checkpoint(dir.sub("run") + "/checkpoints", merged, {}, "safetensors");
  const safetensors::Reader reader(merged);
  ASSERT_EQ(reader.tensors().size(), initial.size());
  for (const auto& [name, before] : initial) {
    const torch::Tensor after = reader.read(name);
    EXPECT_TRUE(torch::isfinite(after).all().item<bool>()) << name;
    EXPECT_FALSE(torch::allclose(after, before)) << name << " did not change in training";
  }
}

// A family without a sampler (pipelines/ has the built-in families' only): [sample] is one error naming
// the family, before a step is taken.
TEST(ModelFamilies, SampleNeedsAFamilyWithASampler) {
  EXPECT_EQ(toy_family().name, "toylatent");
  const KeepThreadCount threads;
  TempDir dir("family_sample");
  const RunConfig config =
      parse_run_config(write_run_file(dir, "[sample]\nevery_steps = 3\nprompts = [\"a red fox\"]\n"));
  synthesize_data(config);
  try {
    run_training(config, TrainOptions{});
    ADD_FAILURE() << "[sample] was accepted for a family without a sampler";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("this run trains a toylatent model (remove [sample]"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.sub("run") + "/checkpoints/latest"));
}

// register_model_family's checks: the same as the built-ins', one error naming the family and what is wrong.
std::string registration_error(ModelFamily family) {
  return error_of([&] { register_model_family(std::move(family)); });
}

TEST(ModelFamilies, RegistrationRefusesIncompleteDuplicateAndMisnamedFamilies) {
  ModelFamily incomplete = toylatent::family();
  incomplete.name = "toyincomplete";
  incomplete.training_loss = nullptr;
  EXPECT_NE(registration_error(incomplete).find("model family 'toyincomplete' is registered incompletely: "
                                                "training_loss is not set"), std::string::npos)
      << registration_error(incomplete);
  ModelFamily duplicate = toylatent::family();
  duplicate.name = "unet";
  EXPECT_NE(registration_error(duplicate).find("model family 'unet' is registered twice"), std::string::npos);
  ModelFamily misnamed = toylatent::family();
  misnamed.name = "toy_latent";
  EXPECT_NE(registration_error(misnamed).find("model family 'toy_latent': a family's name is lowercase letters "
                                              "and digits"), std::string::npos);
  ModelFamily taken_format = toylatent::family();
  taken_format.name = "toyformat";
  taken_format.folder_formats = model_family("unet").folder_formats;
  EXPECT_NE(registration_error(taken_format).find("folder format 'diffusers' of model family 'toyformat' is "
                                                  "registered twice"), std::string::npos);
  for (const ModelFamily& family : model_families())
    EXPECT_TRUE(family.name != "toyincomplete" && family.name != "toy_latent" && family.name != "toyformat")
        << family.name << " was registered although refused";
}


// Step 5's registration: the second family, then its pipeline (each once per process).
const FamilyPipeline& toy_pipeline() {
  [[maybe_unused]] static const bool registered = [] {
    ModelFamily sampled = toylatent::family();
    sampled.name = "toysampled";
    register_model_family(std::move(sampled));
    register_family_pipeline(toylatent::pipeline());
    return true;
  }();
  return *find_family_pipeline("toysampled");
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(ModelFamilies, HowToAddAFamilyPipeline) {
  EXPECT_EQ(toy_pipeline().family, "toysampled");
  const KeepThreadCount threads;
  TempDir dir("family_pipeline");
  const RunConfig config = parse_run_config(write_run_file(
      dir, "[sample]\nevery_steps = 3\nprompts = [\"a red fox\", \"a blue bird\"]\n", "toysampled"));
  synthesize_data(config);
  run_training(config, TrainOptions{});

  // [sample]: rounds at steps 3 and 6, each prompt drawn with the gathered weights (the model's own names,
  // trained between the rounds), listed in metrics.jsonl; the gathered file removed.
  const std::string samples = dir.sub("run") + "/samples/";
  const std::string early = read_text(samples + "step_3_prompt_1.txt"), late = read_text(samples + "step_6_prompt_1.txt");
  for (const char* name : {"cond.weight ", "cond.bias ", "mix.weight ", "mix.bias ", "prompt: a blue bird"})
    EXPECT_NE(early.find(name), std::string::npos) << name << " not in\n" << early;
  EXPECT_NE(early, late) << "the weights did not change between the rounds";
  EXPECT_NE(read_text(samples + "step_6_prompt_0.txt").find("prompt: a red fox"), std::string::npos);
  EXPECT_FALSE(fs::exists(samples + ".weights_for_samples.safetensors"));
  std::vector<int64_t> rounds;
  std::ifstream metrics(dir.sub("run") + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto record = nlohmann::json::parse(line);
    if (!record.contains("validation_samples")) continue;
    rounds.push_back(record.at("step").get<int64_t>());
    EXPECT_EQ(record.at("validation_samples").size(), 2u) << line;
  }
  EXPECT_EQ(rounds, (std::vector<int64_t>{3, 6}));

  // `zest sample`: a folder the pipeline owns goes to its sample, with the weights given.
  const std::string merged = dir.sub("model.safetensors");
  export_checkpoint(dir.sub("run") + "/checkpoints", merged, {}, "safetensors");
  fs::create_directories(dir.sub("toy_folder"));
  write_file(dir.sub("toy_folder/toy_pipeline.txt"), "");
  EXPECT_EQ(&family_pipeline_for_folder(dir.sub("toy_folder")), &toy_pipeline());
  SampleOptions args;
  args.pretrained = dir.sub("toy_folder");
  args.weights.weights_file = merged;
  args.prompt = "a green frog";
  args.output = dir.sub("frog.txt");
  run_sample(args);
  EXPECT_NE(read_text(args.output).find("prompt: a green frog"), std::string::npos);
  EXPECT_EQ(family_pipeline_for_folder(dir.sub("data")).family, "unet") << "the folders no family claims are Stable "
                                                                          "Diffusion's";
}

std::string pipeline_error(FamilyPipeline pipeline) {
  return error_of([&] { register_family_pipeline(std::move(pipeline)); });
}

TEST(ModelFamilies, PipelineRegistrationRefusesUnknownDuplicateAndIncompletePipelines) {
  toy_pipeline();
  toy_family();
  FamilyPipeline unknown = toylatent::pipeline();
  unknown.family = "nosuchfamily";
  EXPECT_NE(pipeline_error(unknown).find("family pipeline 'nosuchfamily': no model family of that name"),
            std::string::npos) << pipeline_error(unknown);
  EXPECT_NE(pipeline_error(toylatent::pipeline()).find("family pipeline 'toysampled': the family has one already"),
            std::string::npos);
  FamilyPipeline unclaimed = toylatent::pipeline();
  unclaimed.family = "toylatent";
  unclaimed.owns_folder = nullptr;
  EXPECT_NE(pipeline_error(unclaimed).find("owns_folder is empty, as unet's is"), std::string::npos)
      << pipeline_error(unclaimed);
  FamilyPipeline incomplete = toylatent::pipeline();
  incomplete.family = "toylatent";
  incomplete.validation = nullptr;
  EXPECT_NE(pipeline_error(incomplete).find("family pipeline 'toylatent': validation is not set"), std::string::npos)
      << pipeline_error(incomplete);
  EXPECT_EQ(find_family_pipeline("toylatent"), nullptr) << "a refused pipeline was registered";
}

}  // namespace
}  // namespace zest::family_test
