// Listing an image folder: the walk, metadata.jsonl captions, name.txt captions, and what is skipped.
#include "data/image_folder.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/json_field.h"
#include "formats/json_text.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

namespace zest {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxCaptionFileBytes = 1 << 20;
constexpr uint64_t kMaxMetadataBytes = uint64_t{1} << 30;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_item_name(const fs::path& p, const CaptionedFolderKind& kind) {
  const std::string ext = lower(p.extension().string());
  return std::find(kind.extensions.begin(), kind.extensions.end(), ext) != kind.extensions.end();
}

// ".jpg/.jpeg/.png" (sep "/") or ".jpg, .jpeg, .png" (sep ", ").
std::string extension_list(const CaptionedFolderKind& kind, const char* sep) {
  std::string out;
  for (size_t i = 0; i < kind.extensions.size(); ++i) out += (i ? sep : "") + kind.extensions[i];
  return out;
}

std::string trimmed(const std::string& s) {
  const char* space = " \t\r\n\v\f";
  const size_t first = s.find_first_not_of(space);
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

struct Walk {
  std::vector<std::string> images;  // relative names of regular image files
  std::vector<std::string> texts;   // relative names of regular .txt files
  std::vector<SkippedFile> skipped;
};

Walk walk(const fs::path& root, const CaptionedFolderKind& kind) {
  Walk w;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    ZEST_CHECK(!ec, printable(root.string()), ": cannot list the folder: ", ec.message());
    const fs::path& p = it->path();
    const std::string rel = p.lexically_relative(root).generic_string();
    const bool image = is_item_name(p, kind), text = lower(p.extension().string()) == ".txt";
    if (!image && !text) continue;
    const std::string kind = file_kind(p.string());
    if (!kind.empty()) {
      if (kind != "a folder") w.skipped.push_back({rel, "is " + kind + ", not a regular file"});
      continue;
    }
    (image ? w.images : w.texts).push_back(rel);
  }
  std::sort(w.images.begin(), w.images.end());
  std::sort(w.texts.begin(), w.texts.end());
  return w;
}

// `caption` cut to kMaxCaptionBytes at a UTF-8 character boundary; `cut` counts the captions cut.
std::string capped(std::string caption, int64_t& cut) {
  if (caption.size() <= kMaxCaptionBytes) return caption;
  size_t end = kMaxCaptionBytes;
  while (end > 0 && (static_cast<unsigned char>(caption[end]) & 0xc0) == 0x80) --end;
  caption.resize(end);
  ++cut;
  return caption;
}

void note_cut_captions(int64_t cut, ImageFolderListing& out) {
  if (cut > 0)
    out.notes.push_back(str(cut, " caption(s) longer than ", kMaxCaptionBytes, " bytes were cut to their first ",
                            kMaxCaptionBytes, " (the text encoder reads only the first 77 tokens, a few hundred characters)"));
}

std::string stem_of(const std::string& rel) { return (fs::path(rel).parent_path() / fs::path(rel).stem()).generic_string(); }

void from_text_files(const fs::path& root, const Walk& w, const CaptionedFolderKind& kind, ImageFolderListing& out) {
  std::map<std::string, std::string> text_of_stem;
  for (const std::string& t : w.texts) text_of_stem[stem_of(t)] = t;
  std::set<std::string> used;
  int64_t cut = 0;
  for (const std::string& image : w.images) {
    const auto it = text_of_stem.find(stem_of(image));
    if (it == text_of_stem.end()) {
      out.skipped.push_back({image, "no caption: " + stem_of(image) + ".txt is missing (or give a metadata.jsonl)"});
      continue;
    }
    used.insert(it->second);
    try {
      out.images.push_back(
          {image, capped(trimmed(read_text_file((root / it->second).string(), "caption file", kMaxCaptionFileBytes)), cut)});
    } catch (const Error& e) {
      out.skipped.push_back({image, e.what()});
    }
  }
  for (const std::string& t : w.texts)
    if (!used.count(t)) out.skipped.push_back({t, "caption file without its " + kind.item + " (no " + extension_list(kind, "/") + " of that name)"});
  note_cut_captions(cut, out);
  out.captions_from = "name.txt files";
}

void from_metadata(const fs::path& root, const Walk& w, const std::string& column, const CaptionedFolderKind& kind,
                   ImageFolderListing& out) {
  const std::string path = (root / "metadata.jsonl").string();
  const std::string text = read_text_file(path, "metadata.jsonl", kMaxMetadataBytes);
  std::set<std::string> present(w.images.begin(), w.images.end());
  std::map<std::string, std::string> caption_of;
  std::set<std::string> columns;
  int64_t number = 0, with_column = 0, cut = 0;
  const size_t skipped_before = out.skipped.size();
  for (size_t from = 0; from < text.size();) {  // line by line, without a second copy of the text
    const size_t end = std::min(text.find('\n', from), text.size());
    const std::string line = text.substr(from, end - from);
    from = end + 1;
    ++number;
    if (trimmed(line).empty()) continue;
    const std::string where = str("metadata.jsonl line ", number);
    nlohmann::json document;
    std::string given, caption;
    try {
      const std::string source = path + " line " + std::to_string(number);
      document = parse_json(line, source);
      const JsonField row(document, source);
      given = row.at("file_name").string();
      for (const auto& [key, value] : row.members())
        if (columns.size() < 32) columns.insert(key);  // for the message when no line has the column
      const JsonField value = row.at(column);
      if (!value.exists()) {
        out.skipped.push_back({where, "has no \"" + printable(column) + "\" (--caption-column)"});
        continue;
      }
      ++with_column;
      if (value.is_array() && value.size() > 0) {
        caption = value.items()[0].string();  // several captions: the first (diffusers draws one at random)
      } else if (!value.is_string()) {
        value.expected("a string or a non-empty array of strings");
      } else {
        caption = value.string();
      }
    } catch (const Error& e) {
      out.skipped.push_back({where, e.what()});
      continue;
    }
    std::string name;
    try {
      name = fs::relative(confined_path(root.string(), given, {path, str("line ", number, " file_name")}, false), root)
                 .generic_string();
    } catch (const Error& e) {
      out.skipped.push_back({where, e.what()});
      continue;
    }
    if (!present.count(name)) {
      out.skipped.push_back({where, "lists " + printable(given) + ", which is not " + kind.article + " file in the folder"});
      continue;
    }
    if (!caption_of.emplace(name, capped(std::move(caption), cut)).second)
      out.skipped.push_back({where, "lists " + printable(given) + " a second time (the first caption is kept)"});
  }
  if (with_column == 0) {
    // Lines refused for another reason (bad JSON, no file_name) say so first: the column may be fine.
    const size_t refused = out.skipped.size() - skipped_before;
    if (columns.empty() && refused > 0) {
      const SkippedFile& first = out.skipped[skipped_before];
      ZEST_FAIL(printable(path), ": no line could be used: all ", refused, " lines were refused (", first.file, ": ",
                printable(first.reason, 160), ")");
    }
    std::string names;
    for (const std::string& c : columns) names += (names.empty() ? "" : ", ") + printable(c, 40);
    ZEST_FAIL(printable(path), ": no line has the caption column \"", printable(column), "\" (columns found: ",
              names.empty() ? "none" : names, "); choose one with --caption-column");
  }
  for (const std::string& image : w.images) {
    const auto it = caption_of.find(image);
    if (it == caption_of.end()) {
      out.skipped.push_back({image, "not listed in metadata.jsonl"});
      continue;
    }
    out.images.push_back({image, it->second});
  }
  note_cut_captions(cut, out);
  out.captions_from = "metadata.jsonl (column " + printable(column) + ")";
}

}  // namespace

ImageFolderListing list_image_folder(const std::string& folder, const std::string& caption_column) {
  return list_captioned_folder(folder, caption_column, {{".jpg", ".jpeg", ".png"}, "image", "an image", "--images"});
}

ImageFolderListing list_captioned_folder(const std::string& folder, const std::string& caption_column,
                                         const CaptionedFolderKind& kind) {
  const fs::path root(folder);
  ZEST_CHECK(fs::is_directory(root), printable(folder), ": no such folder (", kind.option, " needs a folder of ", kind.item, "s)");
  const Walk w = walk(root, kind);
  ImageFolderListing out;
  out.skipped = w.skipped;
  if (fs::exists(root / "metadata.jsonl") || fs::is_symlink(root / "metadata.jsonl"))
    from_metadata(root, w, caption_column, kind, out);
  else
    from_text_files(root, w, kind, out);
  ZEST_CHECK(!w.images.empty(), printable(folder), ": no ", kind.item, "s (", extension_list(kind, ", "),
             ") found in the folder or below it");
  ZEST_CHECK(!out.images.empty(), printable(folder), ": none of the ", w.images.size(), " ", kind.item,
             "s has a caption (", out.skipped.front().file, ": ", out.skipped.front().reason, ")");
  return out;
}

}  // namespace zest
