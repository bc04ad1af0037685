// Where merged model files may be written. A merge writes NAME.tmp and renames it over NAME, so NAME
// must not be anything a rename would destroy: it is refused when it is a folder, a device, a FIFO, a
// socket or a symbolic link, and (offline merges) when it lies inside the checkpoint being merged,
// after resolving symbolic links and "..". Checked before anything is created.
#pragma once

#include <string>

namespace zest::checkpoint {

// Throws zest::Error unless nothing exists at `path` or it is a regular file (not followed if a link).
void check_output_target(const std::string& path);

// Throws zest::Error when `out_path` is `folder` or lies inside it.
void check_output_outside(const std::string& out_path, const std::string& folder);

// Creates the folder that will hold `out_path` (errors name it).
void create_output_folder(const std::string& out_path);

// A whole output file (a picture, an animation, an array) written all-or-nothing: the target checked,
// its folder created, `bytes` written to PATH.tmp and fsynced, then renamed over PATH. A failure leaves
// no PATH.tmp and an existing PATH untouched.
void write_output_file(const std::string& path, const std::string& bytes);

}  // namespace zest::checkpoint
