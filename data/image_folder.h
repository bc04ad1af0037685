// The images and captions of a training folder, as diffusers' ImageFolder reads them (metadata.jsonl with
// file_name and a caption column) or as kohya's sd-scripts do (name.jpg beside name.txt). Files that
// cannot be used are listed with the reason, never fatal; a folder with nothing usable is an error.
#pragma once

#include <string>
#include <vector>

namespace zest {

struct CaptionedImage {
  std::string file;     // relative to the folder, '/'-separated
  std::string caption;
};

struct SkippedFile {
  std::string file;    // relative to the folder (or "metadata.jsonl line N")
  std::string reason;
};

struct ImageFolderListing {
  std::vector<CaptionedImage> images;  // sorted by file name (byte order)
  std::vector<SkippedFile> skipped;    // in the order found
  std::string captions_from;           // "metadata.jsonl (column text)" or "name.txt files"
  std::vector<std::string> notes;      // what was changed on the way, e.g. captions cut to kMaxCaptionBytes
};

// A caption's kept length: the text encoder sees its first 77 tokens (a few hundred characters), so a
// longer caption is cut (at a character boundary) with a note, and tokenizing stays cheap.
inline constexpr size_t kMaxCaptionBytes = 8192;

// Lists `folder` recursively (symbolic links to folders are not followed; only regular files count).
// Images are *.jpg, *.jpeg, *.png (any case). With folder/metadata.jsonl: each line a JSON object with
// "file_name" (inside the folder) and `caption_column` (a string, or a list of strings: the first);
// images it does not list are skipped. Without it: each image's caption is the text of the .txt file
// beside it with the same stem (surrounding white space removed; at most kMaxCaptionBytes kept, as for
// metadata.jsonl captions); an image without one is skipped, and so
// is a .txt without its image. Errors: the folder missing or empty of images, metadata.jsonl unreadable or
// with no line holding the column.
ImageFolderListing list_image_folder(const std::string& folder, const std::string& caption_column = "text");

// The same listing for other captioned files (HY-Motion's .npy clips): what the files are and how messages
// name them.
struct CaptionedFolderKind {
  std::vector<std::string> extensions;  // lower case, with the dot
  std::string item;                     // "image", "motion clip"
  std::string article;                  // "an image", "a motion clip"
  std::string option;                   // the command's option naming the folder, e.g. "--images"
};
ImageFolderListing list_captioned_folder(const std::string& folder, const std::string& caption_column,
                                         const CaptionedFolderKind& kind);

}  // namespace zest
