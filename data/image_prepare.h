// `zest data prepare images`: a folder of captioned images and a pipeline folder (vae/, text_encoder/,
// tokenizer/, for SDXL also text_encoder_2/, tokenizer_2/) → a zest.latents.v1 dataset of VAE latents and
// text-encoder states, as diffusers' training scripts compute them (docs/data_formats.md).
#pragma once

#include "data/dataset_manifest.h"
#include "data/image_decode.h"
#include "data/image_folder.h"

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace zest {

class Communicator;  // comm/communicator.h

struct PrepareImagesOptions {
  std::string pretrained;  // pipeline folder
  std::string images;      // folder of images with captions
  std::string out;         // dataset folder to create (must not hold anything yet)
  int64_t resolution = 512;
  bool center_crop = true;  // false: random crop (diffusers' default without --center_crop)
  bool random_flip = false;
  std::string caption_column = "text";
  bool buckets = false;      // aspect-ratio buckets instead of one square resolution
  uint64_t seed = 0;         // crops, flips and the VAE's latent sample (image i: seed + i)
  int64_t batch_size = 4;    // images encoded together
  int64_t piece_images = 64; // images per resumable piece of work
  int64_t shard_samples = 1024;
  ImageLimits limits;
  std::string device;  // "" = this rank's GPU when there is one, else the CPU
};

struct PrepareImagesReport {
  int64_t samples = 0;                // in the dataset
  std::vector<SkippedFile> skipped;   // listing problems and images that could not be used
  int64_t pieces_total = 0;
  int64_t pieces_reused = 0;          // finished by an earlier, stopped run (resume)
  std::string captions_from;
  DatasetManifest manifest;
};

// Encodes the images of this rank's pieces (piece p of the sorted listing goes to rank p mod world), keeps
// each finished piece in OUT.partial/ (so a stopped run continues where it stopped, given the same
// options), then rank 0 writes the dataset into OUT.partial/dataset/ and renames it to OUT: OUT appears
// complete or not at all. A stop signal (core/interrupt.h) ends the run between images, keeping the
// finished pieces. Progress lines (images/s) go to `log`.
PrepareImagesReport prepare_images(const PrepareImagesOptions& options, Communicator& comm, std::ostream& log);

}  // namespace zest
