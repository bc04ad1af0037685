// An event-file reader for the tests, written apart from the writer (it includes nothing of formats/ or
// train/): its own bit-by-bit CRC-32C, its own TFRecord and protobuf-wire decoding, and the messages read
// by the public field numbers of TensorFlow's event.proto / summary.proto / tensor.proto. A record whose
// length or data CRC does not match is an error, as it is for TensorBoard.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace zest::testing::tb {

// CRC-32C computed bit by bit from the reflected Castagnoli polynomial (no table).
inline uint32_t crc32c_bitwise(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (const char c : bytes) {
    crc ^= static_cast<uint8_t>(c);
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

inline uint32_t tfrecord_mask(uint32_t crc) {
  const uint32_t rotated = (crc >> 15) | (crc << 17);
  return rotated + 0xA282EAD8u;
}

inline uint64_t read_le(const std::string& b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b.at(at + static_cast<size_t>(i)));
  return v;
}

// The payloads of every record of a TFRecord file; throws on a bad CRC or a cut-off record.
inline std::vector<std::string> read_tfrecords(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  const std::string b{std::istreambuf_iterator<char>(in), {}};
  std::vector<std::string> records;
  size_t at = 0;
  while (at < b.size()) {
    if (b.size() - at < 12) throw std::runtime_error("cut-off record header in " + path);
    const uint64_t length = read_le(b, at, 8);
    if (read_le(b, at + 8, 4) != tfrecord_mask(crc32c_bitwise(b.substr(at, 8))))
      throw std::runtime_error("length CRC mismatch in " + path);
    if (b.size() - at - 12 < length + 4) throw std::runtime_error("cut-off record in " + path);
    std::string data = b.substr(at + 12, length);
    if (read_le(b, at + 12 + length, 4) != tfrecord_mask(crc32c_bitwise(data)))
      throw std::runtime_error("data CRC mismatch in " + path);
    records.push_back(std::move(data));
    at += 12 + length + 4;
  }
  return records;
}

// One decoded protobuf field: the varint / fixed value, or the bytes of a length-delimited one.
struct Field {
  int wire_type = 0;
  uint64_t number = 0;  // varint, fixed32 or fixed64 bits
  std::string bytes;
};
using Message = std::multimap<int, Field>;

inline uint64_t read_varint(const std::string& b, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    const auto byte = static_cast<uint8_t>(b.at(at++));
    v |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return v;
  }
  throw std::runtime_error("varint too long");
}

inline Message parse_message(const std::string& b) {
  Message m;
  size_t at = 0;
  while (at < b.size()) {
    const uint64_t key = read_varint(b, at);
    Field f;
    f.wire_type = static_cast<int>(key & 7);
    const int number = static_cast<int>(key >> 3);
    if (f.wire_type == 0) {
      f.number = read_varint(b, at);
    } else if (f.wire_type == 1 || f.wire_type == 5) {
      const int size = f.wire_type == 1 ? 8 : 4;
      if (b.size() - at < static_cast<size_t>(size)) throw std::runtime_error("cut-off fixed field");
      f.number = read_le(b, at, size);
      at += static_cast<size_t>(size);
    } else if (f.wire_type == 2) {
      const uint64_t n = read_varint(b, at);
      if (b.size() - at < n) throw std::runtime_error("cut-off length-delimited field");
      f.bytes = b.substr(at, n);
      at += n;
    } else {
      throw std::runtime_error("unexpected wire type " + std::to_string(f.wire_type));
    }
    m.emplace(number, std::move(f));
  }
  return m;
}

inline const Field* field(const Message& m, int number) {
  const auto it = m.find(number);
  return it == m.end() ? nullptr : &it->second;
}

// What the tests compare: one Event, its one summary value decoded by kind.
struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  bool session_start = false;
  std::string tag;
  enum Kind { kNone, kScalar, kImage, kText } kind = kNone;
  float value = 0;               // scalar: simple_value (2)
  int width = 0, height = 0, colorspace = 0;
  std::string encoded;           // image: encoded_image_string
  std::string plugin;            // metadata.plugin_data.plugin_name
  int dtype = 0;                 // text: TensorProto.dtype
  std::string text;              // text: string_val[0]
};

inline Event decode_event(const std::string& payload) {
  const Message e = parse_message(payload);
  Event out;
  if (const Field* f = field(e, 1)) std::memcpy(&out.wall_time, &f->number, 8);
  if (const Field* f = field(e, 2)) out.step = static_cast<int64_t>(f->number);
  if (const Field* f = field(e, 3)) out.file_version = f->bytes;
  if (const Field* f = field(e, 7)) {
    const Message log = parse_message(f->bytes);
    out.session_start = field(log, 1) != nullptr && field(log, 1)->number == 1;
  }
  const Field* summary = field(e, 5);
  if (summary == nullptr) return out;
  const Message s = parse_message(summary->bytes);
  if (s.count(1) != 1) throw std::runtime_error("expected one value per summary");
  const Message v = parse_message(field(s, 1)->bytes);
  out.tag = field(v, 1) ? field(v, 1)->bytes : "";
  if (const Field* f = field(v, 2)) {
    out.kind = Event::kScalar;
    const auto bits = static_cast<uint32_t>(f->number);
    std::memcpy(&out.value, &bits, 4);
  }
  if (const Field* f = field(v, 4)) {
    out.kind = Event::kImage;
    const Message image = parse_message(f->bytes);
    out.height = static_cast<int>(field(image, 1)->number);
    out.width = static_cast<int>(field(image, 2)->number);
    out.colorspace = static_cast<int>(field(image, 3)->number);
    out.encoded = field(image, 4)->bytes;
  }
  if (const Field* f = field(v, 9)) {
    const Message meta = parse_message(f->bytes);
    if (const Field* plugin = field(meta, 1)) out.plugin = field(parse_message(plugin->bytes), 1)->bytes;
  }
  if (const Field* f = field(v, 8)) {
    out.kind = Event::kText;
    const Message tensor = parse_message(f->bytes);
    out.dtype = static_cast<int>(field(tensor, 1)->number);
    out.text = field(tensor, 8) ? field(tensor, 8)->bytes : "";
  }
  return out;
}

inline std::vector<Event> read_events(const std::string& path) {
  std::vector<Event> events;
  for (const std::string& record : read_tfrecords(path)) events.push_back(decode_event(record));
  return events;
}

}  // namespace zest::testing::tb
