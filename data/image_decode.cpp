// Image decoding with stb_image (header-only; compiled here and nowhere else), limited to JPEG and PNG,
// with the header checked (format, size, colour components) before the pixels are decoded.
#include "data/image_decode.h"

#include "core/check.h"
#include "core/untrusted_file.h"

// Only the two formats zest reads: less decoder code facing untrusted files. Dimensions above 2^16 a side
// are refused by stb itself too (zest's pixel bound is checked first, from the header).
#define STBI_ONLY_JPEG
#define STBI_ONLY_PNG
#define STBI_NO_STDIO
#define STBI_MAX_DIMENSIONS (1 << 16)
// stb's allocations go through a per-decode budget (DecodeBudget below): a PNG whose compressed data
// inflates past what its header declares, or any decode asking for more than the bound, fails inside stb.
#define STBI_MALLOC(size) zest_stbi_malloc(size)
#define STBI_REALLOC_SIZED(p, old_size, new_size) zest_stbi_realloc(p, new_size)
#define STBI_FREE(p) zest_stbi_free(p)
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace {

// The budget of the decode running on this thread: bytes stb holds at once may not pass `limit`, and no
// single buffer may grow past `max_grow` (a PNG's inflated data: what the header declares, twice for
// the interlaced layout's extra filter bytes). Each block carries its size in a header before it.
struct DecodeBudget {
  size_t limit = SIZE_MAX;
  size_t max_grow = SIZE_MAX;
  size_t held = 0;
  bool exceeded = false;  // the decode failed for the budget (stb then reports "outofmem")
};
thread_local DecodeBudget t_budget;
constexpr size_t kHeader = alignof(std::max_align_t);

void* zest_stbi_malloc(size_t size) {
  if (size > t_budget.limit - t_budget.held) {
    t_budget.exceeded = true;
    return nullptr;
  }
  auto* block = static_cast<unsigned char*>(std::malloc(size + kHeader));
  if (block == nullptr) return nullptr;
  *reinterpret_cast<size_t*>(block) = size;
  t_budget.held += size;
  return block + kHeader;
}

void zest_stbi_free(void* p) {
  if (p == nullptr) return;
  auto* block = static_cast<unsigned char*>(p) - kHeader;
  t_budget.held -= *reinterpret_cast<size_t*>(block);
  std::free(block);
}

void* zest_stbi_realloc(void* p, size_t size) {
  if (p == nullptr) return zest_stbi_malloc(size);
  auto* block = static_cast<unsigned char*>(p) - kHeader;
  const size_t old_size = *reinterpret_cast<size_t*>(block);
  if (size > old_size && (size > t_budget.max_grow || size - old_size > t_budget.limit - t_budget.held)) {
    t_budget.exceeded = true;
    return nullptr;
  }
  auto* grown = static_cast<unsigned char*>(std::realloc(block, size + kHeader));
  if (grown == nullptr) return nullptr;
  *reinterpret_cast<size_t*>(grown) = size;
  t_budget.held = t_budget.held - old_size + size;
  return grown + kHeader;
}

}  // namespace

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#endif
#include <stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include <algorithm>
#include <cstring>
#include <memory>

namespace zest {
namespace {

// The size and colour components a file's header declares, read here before stb sees the file: stb
// itself refuses some large images from their header with a message that does not say how large.
struct DeclaredImage {
  int64_t width = 0, height = 0;
  int components = 0;  // JPEG: from the frame header (SOFn); PNG: 0 (not needed)
  bool found = false;
};

uint32_t big_endian(const std::string& b, size_t at, int bytes) {
  uint32_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}

DeclaredImage declared_png(const std::string& b) {
  // The signature (8), IHDR's length (4) and type (4), then width and height (4 each, big-endian).
  if (b.size() < 24 || b.compare(12, 4, "IHDR") != 0) return {};
  return {big_endian(b, 16, 4), big_endian(b, 20, 4), 0, true};
}

// stb decodes 4-component (CMYK/YCCK) JPEGs with its own conversion, which is not PIL's: their count matters.
DeclaredImage declared_jpeg(const std::string& b) {
  size_t at = 2;  // after SOI
  while (at + 4 <= b.size()) {
    if (static_cast<uint8_t>(b[at]) != 0xFF) return {};
    const auto marker = static_cast<uint8_t>(b[at + 1]);
    if (marker == 0xFF) {  // fill byte
      ++at;
      continue;
    }
    const size_t length = big_endian(b, at + 2, 2);
    const bool frame = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (frame) {
      if (at + 10 > b.size()) return {};
      return {big_endian(b, at + 7, 2), big_endian(b, at + 5, 2), static_cast<uint8_t>(b[at + 9]), true};
    }
    if (marker == 0xDA || length < 2) return {};  // start of scan before a frame header: corrupt
    at += 2 + length;
  }
  return {};
}

struct StbFree {
  void operator()(stbi_uc* p) const { stbi_image_free(p); }
};

// Sets this thread's decode budget for one image and clears it after.
class BudgetScope {
 public:
  BudgetScope(const DeclaredImage& declared, size_t file_bytes, const ImageLimits& limits) {
    const auto w = static_cast<size_t>(declared.width), h = static_cast<size_t>(declared.height);
    // PNG's filtered data: at most 8 bytes a pixel (RGBA, 16-bit) and a filter byte a row, more rows
    // for the interlaced layout; stb doubles a buffer when it grows.
    const size_t inflated = 2 * (w * h * 8 + 16 * (w + h)) + 2 * file_bytes + (size_t{1} << 20);
    t_budget = {};
    t_budget.max_grow = inflated;
    t_budget.limit = std::min<size_t>(limits.max_decode_bytes, inflated + 2 * file_bytes + 4 * w * h * 8);
  }
  ~BudgetScope() { t_budget = {}; }
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;
  bool exceeded() const { return t_budget.exceeded; }
};

// JPEG entropy-coded data runs from a scan header to the next marker that is not a restart (RSTn) or a
// stuffed 0xFF. When that marker comes before the scan's last block, stb decodes the missing blocks from
// zero bits (grey) without a word. So the file is decoded a second time with filler bits (0x55) put
// before each such marker: a complete scan never reads them, a cut one does, and the two images differ.
// Returns "" when the file has no scan (nothing to compare).
std::string with_filler_before_scan_ends(const std::string& b) {
  std::string out;
  out.reserve(b.size() + 1024);
  size_t at = 2, copied = 0;
  bool inserted = false;
  while (at + 4 <= b.size()) {
    if (static_cast<uint8_t>(b[at]) != 0xFF) return "";
    const auto marker = static_cast<uint8_t>(b[at + 1]);
    if (marker == 0xFF) {
      ++at;
      continue;
    }
    if (marker == 0xD9) break;  // end of image: what follows is not read
    if ((marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) {  // no length field
      at += 2;
      continue;
    }
    const size_t length = big_endian(b, at + 2, 2);
    if (length < 2) return "";
    at += 2 + length;
    if (marker != 0xDA) continue;
    // The entropy-coded data of this scan: until 0xFF followed by neither 0x00 nor RSTn (nor 0xFF fill).
    const size_t data_start = at;
    while (at + 1 < b.size()) {
      if (static_cast<uint8_t>(b[at]) == 0xFF) {
        const auto next = static_cast<uint8_t>(b[at + 1]);
        if (next != 0x00 && next != 0xFF && !(next >= 0xD0 && next <= 0xD7)) break;
      }
      ++at;
    }
    if (at + 1 >= b.size()) at = b.size();  // the file ends inside the scan
    while (at > data_start && static_cast<uint8_t>(b[at - 1]) == 0xFF) --at;  // a 0xFF cut from its 0x00
    out.append(b, copied, at - copied);
    out.append(64, '\x55');
    copied = at;
    inserted = true;
  }
  if (!inserted) return "";
  out.append(b, copied, std::string::npos);
  return out;
}

}  // namespace

std::string sniff_image_format(const std::string& b) {
  if (b.size() >= 3 && static_cast<uint8_t>(b[0]) == 0xFF && static_cast<uint8_t>(b[1]) == 0xD8 &&
      static_cast<uint8_t>(b[2]) == 0xFF)
    return "jpeg";
  if (b.size() >= 8 && std::memcmp(b.data(), "\x89PNG\r\n\x1a\n", 8) == 0) return "png";
  return "";
}

RgbImage decode_image_bytes(const std::string& bytes, const std::string& name, const ImageLimits& limits) {
  const std::string file = printable(name);
  const std::string format = sniff_image_format(bytes);
  ZEST_CHECK(!format.empty(), file, ": not a JPEG or PNG image (", bytes.empty() ? "the file is empty" : "unknown content",
             "); zest data prepare reads .jpg/.jpeg/.png files");
  ZEST_CHECK(bytes.size() <= static_cast<size_t>(INT32_MAX), file, ": ", bytes.size(), " bytes is too large an image file");
  const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
  const int length = static_cast<int>(bytes.size());
  const DeclaredImage declared = format == "png" ? declared_png(bytes) : declared_jpeg(bytes);
  ZEST_CHECK(declared.found, file, ": unreadable ", format, " header: the file is truncated or corrupt");
  const int64_t declared_pixels = declared.width * declared.height;
  ZEST_CHECK(declared.width > 0 && declared.height > 0, file, ": the ", format, " header declares an empty image");
  ZEST_CHECK(declared_pixels <= limits.max_pixels && declared.width <= 65536 && declared.height <= 65536, file, ": ",
             declared.width, "x", declared.height, " pixels is larger than an image may be (at most ", limits.max_pixels,
             " pixels and 65536 a side); downscale it first");
  int width = 0, height = 0, components = 0;
  ZEST_CHECK(stbi_info_from_memory(data, length, &width, &height, &components), file, ": unreadable ", format,
             " header (", stbi_failure_reason(), "): the file is truncated or corrupt");
  ZEST_CHECK(width == declared.width && height == declared.height, file, ": inconsistent ", format, " header");
  const int64_t pixels = static_cast<int64_t>(width) * height;
  if (format == "jpeg") {
    ZEST_CHECK(declared.components != 4, file, ": a CMYK (4-component) JPEG; convert it to RGB first (e.g. `convert IN -colorspace sRGB OUT.jpg`)");
    // stb decodes a cut-off JPEG without complaint (the missing blocks grey); PIL refuses it, so does zest.
    ZEST_CHECK(bytes.rfind("\xFF\xD9") != std::string::npos && bytes.rfind("\xFF\xD9") > 2, file,
               ": truncated JPEG (no end-of-image marker)");
  }
  const BudgetScope budget(declared, bytes.size(), limits);
  int got_w = 0, got_h = 0, got_c = 0;
  // 3 channels requested: stb replicates grey and drops alpha (PIL's convert("RGB") does the same), and
  // 16-bit PNG samples become their high byte.
  std::unique_ptr<stbi_uc, StbFree> decoded(stbi_load_from_memory(data, length, &got_w, &got_h, &got_c, 3));
  ZEST_CHECK(decoded != nullptr || !budget.exceeded(), file, ": the ", format, " data decodes to more than its ",
             width, "x", height, " header declares (a decompression bomb, or a corrupt file)");
  ZEST_CHECK(decoded != nullptr, file, ": cannot decode the ", format, " data (", stbi_failure_reason(),
             "): the file is truncated or corrupt");
  ZEST_CHECK(got_w == width && got_h == height, file, ": the ", format, " header and the decoded image disagree on the size");
  if (format == "jpeg") {
    const std::string probe = with_filler_before_scan_ends(bytes);
    if (!probe.empty()) {
      std::unique_ptr<stbi_uc, StbFree> again(stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(probe.data()),
                                                                    static_cast<int>(probe.size()), &got_w, &got_h,
                                                                    &got_c, 3));
      ZEST_CHECK(again != nullptr && got_w == width && got_h == height &&
                     std::memcmp(again.get(), decoded.get(), static_cast<size_t>(pixels) * 3) == 0,
                 file, ": truncated JPEG: its image data ends before the last block (the missing part would decode grey)");
    }
  }
  RgbImage image;
  image.width = width;
  image.height = height;
  image.pixels.assign(decoded.get(), decoded.get() + pixels * 3);
  return image;
}

RgbImage decode_image_file(const std::string& path, const ImageLimits& limits) {
  return decode_image_bytes(read_text_file(path, "image", limits.max_file_bytes), path, limits);
}

}  // namespace zest
