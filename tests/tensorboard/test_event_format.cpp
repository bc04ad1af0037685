// The encodings under TensorBoard's event files, checked against published vectors and an independent
// reader (event_file_reader.h): CRC-32C (RFC 3720's vectors), the masked CRC, TFRecord framing, the
// protobuf wire format, and every event message zest writes decoded back field by field.
#include "event_file_reader.h"

#include "formats/crc32c.h"
#include "formats/protobuf_wire.h"
#include "formats/tensorboard_event.h"
#include "formats/tfrecord.h"

#include <gtest/gtest.h>

#include <string>

namespace zest::testing {
namespace {

std::string bytes_0_to_31(bool ascending) {
  std::string b;
  for (int i = 0; i < 32; ++i) b.push_back(static_cast<char>(ascending ? i : 31 - i));
  return b;
}

// RFC 3720 (iSCSI), appendix B.4, and the common check value of "123456789".
TEST(TensorBoardFormat, Crc32cMatchesPublishedVectors) {
  const std::vector<std::pair<std::string, uint32_t>> vectors = {
      {std::string(32, '\0'), 0x8A9136AAu},
      {std::string(32, '\xFF'), 0x62A8AB43u},
      {bytes_0_to_31(true), 0x46DD794Eu},
      {bytes_0_to_31(false), 0x113FDB5Cu},
      {"123456789", 0xE3069283u},
      {"", 0u}};
  for (const auto& [data, expected] : vectors) {
    EXPECT_EQ(crc32c(data), expected) << "writer, " << data.size() << " bytes";
    EXPECT_EQ(tb::crc32c_bitwise(data), expected) << "reader, " << data.size() << " bytes";
  }
  const std::string text = "TensorBoard reads what zest writes";
  EXPECT_EQ(crc32c_extend(crc32c(text.substr(0, 11)), text.substr(11)), crc32c(text));
}

TEST(TensorBoardFormat, MaskedCrcIsRotatedAndOffset) {
  EXPECT_EQ(masked_crc32c(""), 0xA282EAD8u);  // CRC 0: only the offset
  EXPECT_EQ(mask_crc32c(0x00008000u), 0x00000001u + 0xA282EAD8u);  // bit 15 rotates down to bit 0
  EXPECT_EQ(masked_crc32c("123456789"), tb::tfrecord_mask(0xE3069283u));
}

TEST(TensorBoardFormat, TfRecordFrameIsLengthCrcPayloadCrc) {
  const std::string frame = tfrecord_frame("abc");
  ASSERT_EQ(frame.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(frame.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(frame.substr(12, 3), "abc");
  EXPECT_EQ(tb::read_le(frame, 8, 4), tb::tfrecord_mask(tb::crc32c_bitwise(frame.substr(0, 8))));
  EXPECT_EQ(tb::read_le(frame, 15, 4), tb::tfrecord_mask(tb::crc32c_bitwise("abc")));
  // An empty payload still has both CRCs; the data CRC is the bare offset.
  const std::string empty = tfrecord_frame("");
  ASSERT_EQ(empty.size(), 16u);
  EXPECT_EQ(empty.substr(12), std::string("\xD8\xEA\x82\xA2", 4));
}

TEST(TensorBoardFormat, ProtobufWireEncodingsAreTheSpecifiedBytes) {
  EXPECT_EQ(ProtoWriter().varint(1, 300).str(), std::string("\x08\xAC\x02", 3));  // the spec's example
  EXPECT_EQ(ProtoWriter().varint(1, 0).str(), std::string("\x08\x00", 2));
  EXPECT_EQ(ProtoWriter().int64(2, -1).str(), std::string("\x10\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\x01", 11));
  EXPECT_EQ(ProtoWriter().float32(2, 1.0f).str(), std::string("\x15\x00\x00\x80\x3F", 5));
  EXPECT_EQ(ProtoWriter().float64(1, 1.0).str(), std::string("\x09\x00\x00\x00\x00\x00\x00\xF0\x3F", 9));
  EXPECT_EQ(ProtoWriter().bytes(1, "hi").str(), std::string("\x0A\x02hi", 4));
  EXPECT_EQ(ProtoWriter().bytes(16, "").str(), std::string("\x82\x01\x00", 3));  // a two-byte key
  ProtoWriter inner;
  inner.varint(1, 150);
  EXPECT_EQ(ProtoWriter().message(3, inner).str(), std::string("\x1A\x03\x08\x96\x01", 5));
  EXPECT_EQ(ProtoWriter().varint(1, (1ull << 63) + 5).str().size(), 11u);  // key + ten 7-bit groups
}

TEST(TensorBoardFormat, EventsDecodeFieldByField) {
  const tb::Event version = tb::decode_event(file_version_event(1700000000.25));
  EXPECT_EQ(version.file_version, "brain.Event:2");
  EXPECT_DOUBLE_EQ(version.wall_time, 1700000000.25);

  const tb::Event scalar = tb::decode_event(scalar_event(1.5, 1234567890123LL, "train/loss", 0.125f));
  EXPECT_EQ(scalar.kind, tb::Event::kScalar);
  EXPECT_EQ(scalar.step, 1234567890123LL);
  EXPECT_EQ(scalar.tag, "train/loss");
  EXPECT_EQ(scalar.value, 0.125f);
  EXPECT_DOUBLE_EQ(scalar.wall_time, 1.5);

  const std::string png("\x89PNG fake bytes\0with a zero", 26);
  const tb::Event image = tb::decode_event(image_event(2.0, 7, "samples/a cat", png, 640, 480));
  EXPECT_EQ(image.kind, tb::Event::kImage);
  EXPECT_EQ(image.tag, "samples/a cat");
  EXPECT_EQ(image.width, 640);
  EXPECT_EQ(image.height, 480);
  EXPECT_EQ(image.colorspace, 3);
  EXPECT_EQ(image.encoded, png);

  const tb::Event text = tb::decode_event(text_event(3.0, 0, "config", "    [model]\n    name = \"x\""));
  EXPECT_EQ(text.kind, tb::Event::kText);
  EXPECT_EQ(text.plugin, "text");
  EXPECT_EQ(text.dtype, 7);  // DT_STRING
  EXPECT_EQ(text.text, "    [model]\n    name = \"x\"");

  const tb::Event start = tb::decode_event(session_start_event(4.0, 11));
  EXPECT_TRUE(start.session_start);
  EXPECT_EQ(start.step, 11);
  EXPECT_EQ(start.kind, tb::Event::kNone);
}

}  // namespace
}  // namespace zest::testing
