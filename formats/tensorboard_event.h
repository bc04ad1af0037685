// The few TensorBoard event messages zest writes, encoded by hand (formats/protobuf_wire.h) from their
// public field numbers (TensorFlow's event.proto, summary.proto, tensor.proto, tensor_shape.proto):
// Event{wall_time 1, step 2, file_version 3, summary 5, session_log 7}, Summary{value 1},
// Summary.Value{tag 1, simple_value 2, image 4, tensor 8, metadata 9}, Summary.Image{height 1, width 2,
// colorspace 3, encoded_image_string 4}, SummaryMetadata{plugin_data 1 {plugin_name 1, content 2}},
// TensorProto{dtype 1, tensor_shape 2, string_val 8}, SessionLog{status 1}.
// Why not libprotobuf: five small messages, write-only, whose numbers never change (they are TensorBoard's
// file format); generated code would add a build step and a dependency for about a hundred lines.
#pragma once

#include <cstdint>
#include <string>

namespace zest {

// The payload of one event record (formats/tfrecord.h frames it). `wall_time`: seconds since the epoch.
std::string file_version_event(double wall_time);  // "brain.Event:2", the first record of every file
std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value);
// An encoded picture (PNG, or GIF, which TensorBoard shows animated); colorspace 3 = RGB.
std::string image_event(double wall_time, int64_t step, const std::string& tag, const std::string& encoded,
                        int width, int height, int colorspace = 3);
// Markdown text for TensorBoard's text plugin: a scalar DT_STRING tensor tagged with plugin "text".
std::string text_event(double wall_time, int64_t step, const std::string& tag, const std::string& markdown);
// SessionLog START at `step`: TensorBoard then drops what earlier files logged at this step and later
// (a run resumed from a checkpoint overwrites the steps it trains again instead of drawing them twice).
std::string session_start_event(double wall_time, int64_t step);

}  // namespace zest
