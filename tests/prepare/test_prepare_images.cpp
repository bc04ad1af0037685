// `zest data prepare images` end to end on a tiny pipeline folder (tests/prepare/tiny_pipeline.h): images
// and captions → dataset → `zest train` (unet_tiny, loss falls); the stored latents and text states equal
// the modules' own on the same images; skipped-and-listed bad files; clear errors; resume after a kill
// and after SIGINT; aspect-ratio buckets batched within a bucket; SD1.5-shaped pipelines.
#include "comm/self_communicator.h"
#include "common/first_write_hook.h"
#include "common/temp_dir.h"
#include "core/check.h"
#include "core/interrupt.h"
#include "data/dataset.h"
#include "data/aspect_buckets.h"
#include "data/image_prepare.h"
#include "data/prepare_work.h"
#include "data/image_preprocess.h"
#include "data/latent_dataset.h"
#include "data/loader.h"
#include "data/seed.h"
#include "examples/zest_run.h"
#include "models/clip/clip_tokenizer.h"
#include "tiny_pipeline.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <csignal>
#include <set>

namespace zest::testing {
namespace {

std::string test_data(const std::string& name) { return std::string(ZEST_TEST_DATA) + "/prepare/" + name; }

struct Prepared {
  CommandResult result;
  fs::path out;
};

class PrepareImages : public ::testing::Test {
 protected:
  void SetUp() override {
    write_tiny_pipeline(dir() / "pipe");
    fs::create_directories(dir() / "images");
  }
  fs::path dir() const { return work_.path(); }
  fs::path images() const { return dir() / "images"; }

  // n captioned PNGs of assorted sizes (a.png + a.txt).
  void add_captioned(int n) {
    const int sizes[][2] = {{20, 16}, {16, 24}, {33, 17}, {16, 16}, {40, 22}, {18, 30}};
    for (int i = 0; i < n; ++i) {
      const std::string stem = "img" + std::to_string(i);
      write_png(images() / (stem + ".png"), sizes[i % 6][0], sizes[i % 6][1], i);
      clip::test::write_text(images() / (stem + ".txt"), "a picture number " + std::to_string(i) + (i % 2 ? " in red" : " in blue\n"));
    }
  }

  CommandResult prepare(const std::string& args, const std::string& out = "data") {
    const std::string resolution = args.find("--resolution") == std::string::npos ? " --resolution 16 " : " ";
    return run_in(dir(), zest_binary() + " data prepare images --pretrained pipe --images images --out " + out +
                             resolution + args);
  }

  TempDir work_{"prepare"};
};

TEST_F(PrepareImages, ThenTrainAndTheLossFalls) {
  add_captioned(8);
  const auto r = prepare("--random-flip --batch-size 3");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("wrote 8 samples in 1 shard(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("images/s"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(prepare_work_folder((dir() / "data").string())));
  const auto check = run_in(dir(), zest_binary() + " data check data --model unet_tiny");
  ASSERT_EQ(check.status, 0) << check.output;

  std::ofstream(dir() / "run.toml") << "[model]\nname = \"unet_tiny\"\n"
                                    << "[data]\ndir = \"data\"\nbatch_size = 4\nnum_workers = 1\ncaption_dropout = 0.1\n"
                                    << "[optimizer]\nlr = 1e-2\n"
                                    << "[train]\nmax_steps = 24\nlog_every = 1\nseed = 3\n"
                                    << "[checkpoint]\nevery_steps = 0\nmerge_at_end = false\n";
  const auto train = run_in(dir(), zest_binary() + " train run.toml --set 'train.run_dir=\"run\"'");
  ASSERT_EQ(train.status, 0) << train.output;
  const auto steps = logged_steps(dir() / "run" / "metrics.jsonl");
  ASSERT_EQ(steps.size(), 24u) << train.output;
  double first = 0, last = 0;
  for (int i = 0; i < 6; ++i) {
    first += steps[i].loss;
    last += steps[steps.size() - 1 - i].loss;
  }
  // Measured: 1.05 over the first six steps, 0.93 over the last six (the timesteps' noise is large).
  EXPECT_LT(last, 0.95 * first) << "first six " << first / 6 << ", last six " << last / 6;
}

TEST_F(PrepareImages, StoredValuesAreTheModulesOwn) {
  add_captioned(5);
  const auto r = prepare("--seed 7 --random-crop --random-flip --batch-size 2");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto dataset = open_dataset((dir() / "data").string());
  ASSERT_EQ(dataset->size(), 5);
  const auto m = dataset->manifest();
  EXPECT_EQ(m.feature("text_dim"), 12);
  EXPECT_EQ(m.feature("pooled_dim"), 8);
  EXPECT_EQ(m.feature("height"), 8);
  EXPECT_EQ(m.empty_prompt_file, "empty_prompt.safetensors");

  torch::NoGradGuard no_grad;
  const auto vae = vae::load_autoencoder_kl(dir() / "pipe" / "vae");
  const auto tok1 = clip::CLIPTokenizer::from_folder(dir() / "pipe" / "tokenizer");
  const auto tok2 = clip::CLIPTokenizer::from_folder(dir() / "pipe" / "tokenizer_2");
  const auto enc1 = clip::load_clip_text_model(dir() / "pipe" / "text_encoder");
  const auto enc2 = clip::load_clip_text_model(dir() / "pipe" / "text_encoder_2");
  auto text = [&](const std::string& caption) {
    const auto a = enc1->forward(torch::tensor(tok1.encode_padded(caption)).unsqueeze(0));
    const auto b = enc2->forward(torch::tensor(tok2.encode_padded(caption)).unsqueeze(0));
    return std::pair{torch::cat({a.penultimate(), b.penultimate()}, -1)[0], b.text_embeds[0]};
  };
  for (int64_t i = 0; i < 5; ++i) {
    SCOPED_TRACE("image " + std::to_string(i));
    const Sample s = dataset->get(i, 0);  // one bucket: sample i is image i of the sorted listing
    const std::string stem = "img" + std::to_string(i);
    PreprocessOptions o;
    o.target = {16, 16};
    o.center_crop = false;
    o.random_flip = true;
    const PreparedImage p = preprocess_image(decode_image_file((images() / (stem + ".png")).string()), o, mix_seed(7, i));
    // Two copies: the VAE's CPU GroupNorm refuses a batch of one (data/image_prepare.cpp does the same).
    const auto dist = vae->encode(p.pixels.unsqueeze(0).expand({2, -1, -1, -1}).contiguous());
    const vae::LatentDistribution first{dist.mean.narrow(0, 0, 1), dist.logvar.narrow(0, 0, 1)};
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(7 + i);
    const auto latent = vae->to_unet_latents(first.sample(gen))[0];
    EXPECT_TRUE(torch::allclose(s.at("sample"), latent, 1e-4, 1e-5));
    const auto [tokens, pooled] = text("a picture number " + std::to_string(i) + (i % 2 ? " in red" : " in blue"));
    EXPECT_TRUE(torch::allclose(s.at("encoder_hidden_states"), tokens, 1e-4, 1e-5));
    EXPECT_TRUE(torch::allclose(s.at("text_embeds"), pooled, 1e-4, 1e-5));
    const auto& t = p.time_ids;
    EXPECT_TRUE(torch::equal(s.at("time_ids"), torch::tensor({t[0], t[1], t[2], t[3], t[4], t[5]}, torch::kFloat32)));
  }
  const safetensors::Reader empty((dir() / "data" / "empty_prompt.safetensors").string());
  const auto [tokens, pooled] = text("");
  EXPECT_TRUE(torch::allclose(empty.read("text_embeds_seq"), tokens, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(empty.read("pooled"), pooled, 1e-5, 1e-6));
}

TEST_F(PrepareImages, BadFilesAreSkippedAndListed) {
  add_captioned(3);
  clip::test::write_text(images() / "broken.png", "\x89PNG\r\n\x1a\nnot really");
  clip::test::write_text(images() / "broken.txt", "a broken file");
  clip::test::write_text(images() / "orphan.txt", "a caption without its image");
  write_png(images() / "no_caption.png", 16, 16, 9);
  fs::copy(test_data("cmyk_9x7.jpg"), images() / "cmyk.jpg");
  clip::test::write_text(images() / "cmyk.txt", "cmyk");
  for (const char* name : {"grey_9x7.png", "grey_alpha_9x7.png", "rgba_9x7.png", "rgb16_9x7.png", "palette_9x7.png"}) {
    fs::copy(test_data(name), images() / name);
    clip::test::write_text(images() / (fs::path(name).stem().string() + ".txt"), std::string("a ") + name);
  }
  fs::create_directories(images() / "sub");
  write_jpeg(images() / "sub" / "deep.jpg", 24, 16, 4);
  clip::test::write_text(images() / "sub" / "deep.txt", "a jpeg in a subfolder");
  const auto r = prepare("");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("wrote 9 samples"), std::string::npos) << r.output;  // 3 + 5 modes + the jpeg
  EXPECT_NE(r.output.find("skipped 4 file(s)"), std::string::npos) << r.output;
  const std::string listed = clip::test::read_text(dir() / "data" / "skipped.txt");
  EXPECT_NE(listed.find("broken.png\tunreadable png header"), std::string::npos) << listed;
  EXPECT_NE(listed.find("orphan.txt\tcaption file without its image"), std::string::npos) << listed;
  EXPECT_NE(listed.find("no_caption.png\tno caption"), std::string::npos) << listed;
  EXPECT_NE(listed.find("cmyk.jpg\ta CMYK"), std::string::npos) << listed;
  EXPECT_EQ(open_dataset((dir() / "data").string())->size(), 9);
}

TEST_F(PrepareImages, ClearErrorsAndNothingWritten) {
  // Empty folder.
  auto r = prepare("");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("images: no images (.jpg, .jpeg, .png) found"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir() / "data"));
  // Every image unusable.
  clip::test::write_text(images() / "a.png", "garbage");
  clip::test::write_text(images() / "a.txt", "a");
  r = prepare("");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("none of the 1 images could be used (a.png: not a JPEG or PNG"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir() / "data"));
  EXPECT_FALSE(fs::exists(prepare_work_folder((dir() / "data").string())));  // nothing worth resuming
  // The pipeline without vae/.
  fs::remove(images() / "a.png");
  add_captioned(2);
  fs::rename(dir() / "pipe" / "vae", dir() / "vae_away");
  r = prepare("");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("pipe/vae: missing (the VAE encodes the images"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Exception"), std::string::npos) << r.output;
  fs::rename(dir() / "vae_away", dir() / "pipe" / "vae");
  // An existing dataset is never written over.
  fs::create_directories(dir() / "taken");
  clip::test::write_text(dir() / "taken" / "keep.txt", "mine");
  r = prepare("", "taken");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("taken: already exists and is not an empty folder"), std::string::npos) << r.output;
  EXPECT_EQ(clip::test::read_text(dir() / "taken" / "keep.txt"), "mine");
  // metadata.jsonl: a missing column is an error; a row naming a missing file is listed.
  clip::test::write_text(images() / "metadata.jsonl", "{\"file_name\": \"img0.png\", \"caption\": \"x\"}\n");
  r = prepare("");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("no line has the caption column \"text\" (columns found: caption, file_name)"), std::string::npos)
      << r.output;
  r = prepare("--caption-column caption");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("wrote 1 samples"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("img1.png: not listed in metadata.jsonl"), std::string::npos) << r.output;
  // A resolution the VAE cannot halve evenly.
  r = prepare("--resolution 15", "other");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--resolution 15 must be a multiple of 2"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir() / "other"));
}

PrepareImagesOptions in_process_options(const fs::path& dir, const std::string& out) {
  PrepareImagesOptions o;
  o.pretrained = (dir / "pipe").string();
  o.images = (dir / "images").string();
  o.out = (dir / out).string();
  o.resolution = 16;
  o.piece_images = 2;
  o.batch_size = 2;
  o.device = "cpu";
  return o;
}

void expect_same_dataset(const fs::path& a, const fs::path& b) {
  const auto x = open_dataset(a.string()), y = open_dataset(b.string());
  ASSERT_EQ(x->size(), y->size());
  for (int64_t i = 0; i < x->size(); ++i)
    for (const auto& [name, tensor] : x->get(i, 0)) EXPECT_TRUE(torch::equal(tensor, y->get(i, 0).at(name))) << name << " " << i;
}

TEST_F(PrepareImages, ResumesAfterAKillAndAfterSigint) {
  add_captioned(7);
  SelfCommunicator self;
  std::ostringstream quiet;
  prepare_images(in_process_options(dir(), "whole"), self, quiet);

  // A kill after the first piece: the run ends there (the log throws), one piece and a cut-off one stay.
  FirstWriteHook killer([] { throw std::runtime_error("killed"); });
  std::ostream killed_log(&killer);
  killed_log.exceptions(std::ios::badbit);
  EXPECT_ANY_THROW(prepare_images(in_process_options(dir(), "data"), self, killed_log));
  const fs::path work = prepare_work_folder((dir() / "data").string());
  ASSERT_TRUE(fs::exists(fs::path(work) / "pieces" / "piece-000000.safetensors"));
  EXPECT_FALSE(fs::exists(fs::path(work) / "pieces" / "piece-000001.safetensors"));
  clip::test::write_text(fs::path(work) / "pieces" / "piece-000001.safetensors.tmp", "half a piece");
  EXPECT_FALSE(fs::exists(dir() / "data"));
  // Another option: refused, the work kept.
  const auto other = prepare("--seed 5");
  EXPECT_NE(other.status, 0);
  EXPECT_NE(other.output.find("was started with other options"), std::string::npos) << other.output;
  EXPECT_TRUE(fs::exists(work));

  // SIGINT during the second run: it stops between images, keeps its finished pieces, writes no dataset.
  {
    const InterruptGuard guard;
    FirstWriteHook interrupter([] { std::raise(SIGINT); });
    std::ostream log(&interrupter);
    EXPECT_THROW(prepare_images(in_process_options(dir(), "data"), self, log), Error);
    reset_interrupt();
  }
  EXPECT_FALSE(fs::exists(dir() / "data"));
  EXPECT_TRUE(fs::exists(fs::path(work) / "pieces" / "piece-000001.safetensors"));
  EXPECT_FALSE(fs::exists(fs::path(work) / "pieces" / "piece-000001.safetensors.tmp"));

  // The CLI (its default piece size differs: the job says so) — so finish in process with the same options.
  std::ostringstream log;
  const PrepareImagesReport report = prepare_images(in_process_options(dir(), "data"), self, log);
  EXPECT_EQ(report.pieces_reused, 2);
  EXPECT_EQ(report.pieces_total, 4);
  EXPECT_FALSE(fs::exists(work));
  expect_same_dataset(dir() / "whole", dir() / "data");
}

TEST_F(PrepareImages, BucketsBatchWithinABucketAndTrain) {
  const int sizes[][2] = {{64, 32}, {32, 64}, {40, 40}, {68, 32}, {30, 62}, {38, 36}, {80, 38}, {32, 32}};
  for (int i = 0; i < 8; ++i) {
    write_png(images() / ("b" + std::to_string(i) + ".png"), sizes[i][0], sizes[i][1], i);
    clip::test::write_text(images() / ("b" + std::to_string(i) + ".txt"), "bucket test " + std::to_string(i));
  }
  const auto r = prepare("--buckets --resolution 32");  // buckets in steps of 16 pixels (8 latent pixels)
  ASSERT_EQ(r.status, 0) << r.output;
  const auto dataset = open_dataset((dir() / "data").string());
  ASSERT_EQ(dataset->size(), 8);
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (const ShardEntry& s : dataset->manifest().shards) {
    EXPECT_GT(s.height, 0);
    shapes.insert({s.height, s.width});
  }
  EXPECT_GE(shapes.size(), 3u);  // wide, tall, square at least
  const std::vector<Size2> buckets = aspect_buckets(32, 16);
  for (int64_t i = 0; i < 8; ++i) {  // each image in its nearest bucket; the time ids' target is the bucket
    const Sample s = dataset->get(i, 0);
    const auto t = s.at("time_ids");
    const Size2 bucket = nearest_bucket(buckets, {static_cast<int64_t>(t[0].item<float>()), static_cast<int64_t>(t[1].item<float>())});
    EXPECT_EQ(s.at("sample").size(1) * 2, bucket.height);
    EXPECT_EQ(s.at("sample").size(2) * 2, bucket.width);
    EXPECT_EQ(t[4].item<float>(), bucket.height);
    EXPECT_EQ(t[5].item<float>(), bucket.width);
  }
  EXPECT_NE(nearest_bucket(buckets, {16, 32}), nearest_bucket(buckets, {32, 16}));
  SamplerOptions so;
  so.groups = dataset->sample_groups();
  so.group_batch = 2;
  LoaderOptions lo;
  lo.batch_size = 2;
  lo.num_workers = 1;
  DataLoader loader(dataset, DistributedSampler(dataset->size(), 0, 1, so), lo);
  for (int b = 0; b < 12; ++b) EXPECT_NO_THROW(loader.next());  // collate refuses mixed sizes

  std::ofstream(dir() / "run.toml") << "[model]\nname = \"unet_tiny\"\n[data]\ndir = \"data\"\nbatch_size = 2\n"
                                    << "[train]\nmax_steps = 4\nlog_every = 1\n[checkpoint]\nevery_steps = 0\nmerge_at_end = false\n";
  const auto train = run_in(dir(), zest_binary() + " train run.toml --set 'train.run_dir=\"run\"'");
  ASSERT_EQ(train.status, 0) << train.output;
  EXPECT_EQ(logged_steps(dir() / "run" / "metrics.jsonl").size(), 4u);
}

TEST_F(PrepareImages, TwoRanksEncodeTheirShareAndGiveTheSameDataset) {
  add_captioned(5);
  const auto one = prepare("--piece-images 1 --random-flip", "one");
  ASSERT_EQ(one.status, 0) << one.output;
  const auto two = run_in(dir(), zest_binary() + " launch -n 2 -- " + zest_binary() +
                                     " data prepare images --pretrained pipe --images images --out two --resolution 16"
                                     " --piece-images 1 --random-flip");
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_NE(two.output.find("[rank 1]: piece 2/5"), std::string::npos) << two.output;  // rank 1 took pieces 2 and 4
  EXPECT_NE(two.output.find("[rank 0]: piece 3/5"), std::string::npos) << two.output;
  expect_same_dataset(dir() / "one", dir() / "two");
}

TEST_F(PrepareImages, Sd15ShapedPipeline) {
  fs::remove_all(dir() / "pipe");
  write_tiny_pipeline(dir() / "pipe", /*sdxl=*/false);
  add_captioned(2);
  const auto r = prepare("");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto m = read_manifest((dir() / "data").string());
  EXPECT_EQ(m.feature("text_dim"), 12);
  EXPECT_EQ(m.feature("pooled_dim"), 0);
  EXPECT_EQ(m.feature("time_ids"), 0);
  const Sample s = open_dataset((dir() / "data").string())->get(0, 0);
  EXPECT_EQ(s.count("text_embeds"), 0u);
  EXPECT_EQ(s.at("encoder_hidden_states").sizes(), (std::vector<int64_t>{77, 12}));
}

}  // namespace
}  // namespace zest::testing
