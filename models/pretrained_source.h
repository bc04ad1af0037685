// `[model] pretrained`: what a path holds (a safetensors file with the model's own names, or a folder of
// one of the families' formats, models/folder_format.h), the architecture a folder's own config gives,
// and the record a checkpoint keeps so that an export can write the original folder format again.
#pragma once

#include "formats/json_field.h"
#include "models/folder_format.h"
#include "models/model_resolve.h"

#include <nlohmann/json.hpp>

#include <string>

namespace zest {

// Recognises `path` by the files present; the error lists what was looked for and what was found.
PretrainedLayout find_pretrained_layout(const std::string& path);

// A model whose family and configuration come from a pretrained folder's config (as the folder format's
// family reads it, e.g. config.json as diffusers reads it). Fields the model ignores go to `notes`.
ResolvedModel resolve_pretrained_folder(const std::string& path);

// What the trainer saves with every checkpoint (extra metadata "model_source"): {"family": ...,
// "format": "zest" | a folder format's name} plus, for a pretrained folder, "config_text" (its config
// file, verbatim) and what the format adds (a HY-Motion release's pipeline "tensors", tensor_json.h).
nlohmann::json model_source_record(const ResolvedModel& model);
// The record read back from a checkpoint (extra.model_source), checked as its readers take it: an object
// whose "family" and "format" are strings, with "config_text" a string unless the format is "zest".
// Errors name the manifest and the field (formats/json_field.h).
void check_model_source_record(const JsonField& record);

}  // namespace zest
