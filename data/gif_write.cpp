// GIF89a writing (see gif_write.h): screen descriptor, global colour table, the NETSCAPE2.0 loop block,
// then per frame a graphic control block (delay), an image descriptor and LZW data in 255-byte sub-blocks.
#include "data/gif_write.h"

#include "checkpoint/output_path.h"
#include "core/check.h"


namespace zest {
namespace {

constexpr int kMinCodeSize = 8;  // indices are bytes
constexpr int kClear = 1 << kMinCodeSize, kEnd = kClear + 1, kMaxCodes = 4096;

void put16(std::string& out, int v) {
  out.push_back(static_cast<char>(v & 0xFF));
  out.push_back(static_cast<char>((v >> 8) & 0xFF));
}

// Variable-width codes packed least significant bit first, cut into sub-blocks of at most 255 bytes.
class CodeWriter {
 public:
  void put(int code, int width) {
    bits_ |= static_cast<uint64_t>(code) << count_;
    count_ += width;
    while (count_ >= 8) {
      bytes_.push_back(static_cast<char>(bits_ & 0xFF));
      bits_ >>= 8;
      count_ -= 8;
    }
  }
  void finish_into(std::string& out) {
    if (count_ > 0) bytes_.push_back(static_cast<char>(bits_ & 0xFF));
    for (size_t at = 0; at < bytes_.size(); at += 255) {
      const size_t n = std::min<size_t>(255, bytes_.size() - at);
      out.push_back(static_cast<char>(n));
      out.append(bytes_, at, n);
    }
    out.push_back('\0');
  }

 private:
  std::string bytes_;
  uint64_t bits_ = 0;
  int count_ = 0;
};

// LZW as GIF defines it: a clear code first; the code width grows when the table passes a power of two
// (up to 12 bits); a full table (4096 codes) is answered with a clear code and a fresh table.
void compress(const std::vector<uint8_t>& pixels, std::string& out) {
  std::vector<int16_t> table(static_cast<size_t>(kMaxCodes) * 256, -1);  // (prefix code, byte) → code
  CodeWriter codes;
  int width = kMinCodeSize + 1, next = kEnd + 1;
  codes.put(kClear, width);
  int prefix = pixels[0];
  for (size_t i = 1; i < pixels.size(); ++i) {
    const size_t key = static_cast<size_t>(prefix) * 256 + pixels[i];
    if (table[key] >= 0) {
      prefix = table[key];
      continue;
    }
    codes.put(prefix, width);
    if (next < kMaxCodes) {
      table[key] = static_cast<int16_t>(next++);
      if (next > (1 << width) && width < 12) ++width;  // the decoder widens one code later than it adds
    } else {
      codes.put(kClear, width);
      std::fill(table.begin(), table.end(), int16_t{-1});
      width = kMinCodeSize + 1;
      next = kEnd + 1;
    }
    prefix = pixels[i];
  }
  codes.put(prefix, width);
  codes.put(kEnd, width);
  out.push_back(static_cast<char>(kMinCodeSize));
  codes.finish_into(out);
}

}  // namespace

std::string encode_gif(const GifAnimation& a) {
  ZEST_CHECK(a.width > 0 && a.height > 0 && a.width < 65536 && a.height < 65536, "GIF: size ", a.width, "x", a.height,
             " is out of range");
  ZEST_CHECK(!a.palette.empty() && a.palette.size() <= 256, "GIF: the palette needs 1 to 256 colours, has ",
             a.palette.size());
  ZEST_CHECK(!a.frames.empty(), "GIF: no frames");
  int table_bits = 1;
  while ((size_t{1} << table_bits) < a.palette.size()) ++table_bits;
  std::string out = "GIF89a";
  put16(out, a.width);
  put16(out, a.height);
  out.push_back(static_cast<char>(0x80 | ((table_bits - 1) << 4) | (table_bits - 1)));  // global table follows
  out.push_back('\0');  // background colour index
  out.push_back('\0');  // no aspect ratio
  for (size_t i = 0; i < (size_t{1} << table_bits); ++i) {
    const auto rgb = i < a.palette.size() ? a.palette[i] : std::array<uint8_t, 3>{0, 0, 0};
    out.append(reinterpret_cast<const char*>(rgb.data()), 3);
  }
  out += std::string("\x21\xFF\x0BNETSCAPE2.0\x03\x01", 16);  // loop ...
  put16(out, 0);                                               // ... forever
  out.push_back('\0');
  const size_t pixels = static_cast<size_t>(a.width) * static_cast<size_t>(a.height);
  for (size_t f = 0; f < a.frames.size(); ++f) {
    const auto& frame = a.frames[f];
    ZEST_CHECK(frame.size() == pixels, "GIF: frame ", f, " has ", frame.size(), " pixels; expected ", pixels);
    for (const uint8_t index : frame) {
      ZEST_CHECK(index < a.palette.size(), "GIF: frame ", f, " uses colour ", int{index}, " of a ", a.palette.size(),
                 "-colour palette");
    }
    out += std::string("\x21\xF9\x04\x00", 4);  // graphic control: no transparency, no disposal
    put16(out, a.delay_centiseconds);
    out += std::string("\x00\x00", 2);
    out.push_back('\x2C');  // image descriptor: the full screen, no local table
    put16(out, 0);
    put16(out, 0);
    put16(out, a.width);
    put16(out, a.height);
    out.push_back('\0');
    compress(frame, out);
  }
  out.push_back('\x3B');
  return out;
}

void write_gif(const std::string& path, const GifAnimation& animation) {
  checkpoint::write_output_file(path, encode_gif(animation));
}

}  // namespace zest
