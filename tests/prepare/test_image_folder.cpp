// The listing of an image folder (data/image_folder.h) and the bucket list (data/aspect_buckets.h):
// extensions in any case, captions trimmed, the first of two metadata.jsonl rows for one image kept,
// a clear message when every line was refused, and one bucket per aspect ratio, the largest.
#include "data/aspect_buckets.h"
#include "data/image_folder.h"
#include "prepare/tiny_pipeline.h"

#include "common/temp_dir.h"
#include "core/check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace zest::testing {
namespace {

std::vector<std::string> files_of(const ImageFolderListing& listing) {
  std::vector<std::string> out;
  for (const CaptionedImage& image : listing.images) out.push_back(image.file);
  return out;
}

TEST(ImageFolder, ExtensionsInAnyCaseAndTrimmedCaptions) {
  const TempDir dir("image_folder_case");
  const fs::path root(dir.path());
  write_jpeg(root / "a.JPG", 16, 16, 1);
  write_jpeg(root / "b.Jpeg", 16, 16, 2);
  write_png(root / "c.PNG", 16, 16, 3);
  clip::test::write_text(root / "a.txt", "  a cat\n");
  clip::test::write_text(root / "b.TXT", "\ta dog \r\n");
  clip::test::write_text(root / "c.txt", "a bird");
  const ImageFolderListing listing = list_image_folder(root.string());
  EXPECT_EQ(files_of(listing), (std::vector<std::string>{"a.JPG", "b.Jpeg", "c.PNG"}));
  ASSERT_EQ(listing.images.size(), 3u);
  EXPECT_EQ(listing.images[0].caption, "a cat");
  EXPECT_EQ(listing.images[1].caption, "a dog");
  EXPECT_EQ(listing.images[2].caption, "a bird");
  EXPECT_TRUE(listing.skipped.empty());
}

TEST(ImageFolder, DuplicateMetadataRowKeepsTheFirstCaption) {
  const TempDir dir("image_folder_dup");
  const fs::path root(dir.path());
  write_png(root / "a.png", 8, 8, 1);
  write_png(root / "b.png", 8, 8, 2);
  clip::test::write_text(root / "metadata.jsonl", R"({"file_name": "a.png", "text": "first"}
{"file_name": "b.png", "text": "bee"}
{"file_name": "./a.png", "text": "second"}
)");
  const ImageFolderListing listing = list_image_folder(root.string());
  ASSERT_EQ(listing.images.size(), 2u);
  EXPECT_EQ(listing.images[0].caption, "first");
  ASSERT_EQ(listing.skipped.size(), 1u);
  EXPECT_EQ(listing.skipped[0].file, "metadata.jsonl line 3");
  EXPECT_NE(listing.skipped[0].reason.find("a second time (the first caption is kept)"), std::string::npos)
      << listing.skipped[0].reason;
}

TEST(ImageFolder, EveryLineRefusedSaysWhyNotWhichColumns) {
  const TempDir dir("image_folder_refused");
  const fs::path root(dir.path());
  write_png(root / "a.png", 8, 8, 1);
  clip::test::write_text(root / "metadata.jsonl", "{\"file\": \"a.png\"}\nnot json\n");
  std::string message;
  try {
    list_image_folder(root.string());
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("no line could be used: all 2 lines were refused (metadata.jsonl line 1: "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("metadata.jsonl line 1: field 'file_name' is missing (expected a string)"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("columns found: none"), std::string::npos) << message;
}

// Each ratio keeps its largest bucket: at 104 with step 8 several sizes share a ratio (e.g. 104×104 and
// smaller squares), so keeping the smallest would show.
TEST(AspectBuckets, EachBucketIsTheLargestOfItsRatio) {
  for (const auto& [resolution, multiple] : std::vector<std::pair<int64_t, int64_t>>{{104, 8}, {512, 64}, {96, 8}}) {
    const std::vector<Size2> buckets = aspect_buckets(resolution, multiple);
    // The candidate sizes as data/aspect_buckets.cpp lays them out (the square of the resolution, and
    // each width on the step grid with the tallest height of the grid within the resolution's area).
    const int64_t step = std::max(multiple, (resolution >= 256 ? 64 : resolution / 4) / multiple * multiple);
    const int64_t low = std::max(step, resolution / 2 / step * step), high = 2 * resolution;
    std::vector<Size2> candidates{{resolution, resolution}};
    for (int64_t w = low; w <= high; w += step) {
      const int64_t h = std::min(high, resolution * resolution / w / step * step);
      if (h < low) continue;
      candidates.push_back({h, w});
      candidates.push_back({w, h});
    }
    std::map<std::pair<int64_t, int64_t>, int64_t> largest;  // reduced ratio → largest area
    for (const Size2& c : candidates) {
      const int64_t g = std::gcd(c.width, c.height);
      int64_t& area = largest[{c.width / g, c.height / g}];
      area = std::max(area, c.width * c.height);
    }
    std::set<std::pair<int64_t, int64_t>> ratios;
    for (const Size2& b : buckets) {
      const int64_t g = std::gcd(b.width, b.height);
      const std::pair<int64_t, int64_t> ratio{b.width / g, b.height / g};
      EXPECT_TRUE(ratios.insert(ratio).second) << resolution << ": two buckets of ratio " << ratio.first << ":" << ratio.second;
      ASSERT_TRUE(largest.count(ratio)) << b.width << "x" << b.height;
      EXPECT_EQ(b.width * b.height, largest[ratio])
          << resolution << ": bucket " << b.width << "x" << b.height << " is not the largest of its ratio";
    }
    EXPECT_NE(std::find_if(buckets.begin(), buckets.end(),
                           [&](const Size2& b) { return b.width == resolution && b.height == resolution; }),
              buckets.end());
  }
}

}  // namespace
}  // namespace zest::testing
