// The work folder of a prepare command, its pieces and the published dataset (see prepare_work.h).
#include "data/prepare_work.h"

#include "checkpoint/checksum.h"
#include "comm/communicator.h"
#include "core/check.h"
#include "core/interrupt.h"
#include "core/untrusted_file.h"
#include "formats/json_text.h"
#include "formats/safetensors.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <ostream>

namespace zest {

namespace fs = std::filesystem;

std::string prepare_work_folder(const std::string& out) {
  fs::path p = fs::path(out).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "out/" → "out"
  return p.string() + ".partial";
}

void check_new_dataset_folder(const std::string& out) {
  ZEST_CHECK(!fs::exists(out) || (fs::is_directory(out) && fs::is_empty(out)), printable(out),
             ": already exists and is not an empty folder; choose a new --out (a dataset is written whole, never over another)");
}

torch::Device prepare_device(const std::string& requested, int local_rank) {
  if (!requested.empty()) return torch::Device(requested);
  if (torch::cuda::is_available()) {
    const auto count = static_cast<int>(torch::cuda::device_count());
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % count));
  }
  return torch::Device(torch::kCPU);
}

std::string listing_digest(const ImageFolderListing& listing) {
  checkpoint::Xxh64Stream hash;
  for (const CaptionedImage& item : listing.images) {
    hash.update(item.file.data(), item.file.size() + 1);  // with the terminating NUL as separator
    hash.update(item.caption.data(), item.caption.size() + 1);
  }
  return checkpoint::to_hex(hash.digest());
}

std::string prepare_piece_path(const fs::path& work, int64_t piece) {
  char name[64];
  std::snprintf(name, sizeof name, "piece-%06lld.safetensors", static_cast<long long>(piece));
  return (work / "pieces" / name).string();
}

namespace {

JsonDocument piece_record(const safetensors::Reader& piece, const char* key) {
  const auto it = piece.metadata().find(key);
  if (it == piece.metadata().end()) {
    ZEST_FAIL(piece.path(), ": its metadata has no \"", key, "\" (not a piece written by zest data prepare; remove "
              "the unfinished work folder to start afresh)");
  }
  return JsonDocument(parse_ordered_json(it->second, piece.path() + ": metadata " + key), piece.path(),
                      std::string("__metadata__.") + key);
}

std::string one_decimal(double x) { return str(static_cast<int64_t>(x * 10) / 10.0); }

}  // namespace

FinishedPieces::FinishedPieces(const PrepareWork& work, int64_t pieces) {
  for (int64_t p = 0; p < pieces; ++p) {
    const safetensors::Reader& piece = *pieces_.emplace_back(std::make_unique<safetensors::Reader>(work.piece_path(p)));
    documents_.push_back(std::make_unique<JsonDocument>(piece_record(piece, "items")));
    const std::vector<JsonField> items = documents_.back()->root().items();
    for (size_t k = 0; k < items.size(); ++k) samples_.push_back({p, static_cast<int64_t>(k), items[k]});
    const JsonDocument skipped = piece_record(piece, "skipped");
    for (const JsonField& s : skipped.root().items()) skipped_.push_back({s.at("file").string(), s.at("reason").string()});
  }
}

FinishedPieces::~FinishedPieces() = default;

torch::Tensor FinishedPieces::read(int64_t piece, int64_t key, const std::string& name) const {
  return pieces_.at(static_cast<size_t>(piece))->read(name + "." + std::to_string(key));
}

PrepareWork::PrepareWork(Communicator& comm, const std::string& out, const std::string& job, std::string items_noun,
                         const std::string& listing_noun)
    : comm_(comm), out_(out), work_(prepare_work_folder(out)), items_noun_(std::move(items_noun)) {
  if (comm_.rank() == 0) {
    const fs::path job_file = work_ / "job.json";
    if (fs::exists(job_file)) {
      const std::string saved = read_text_file(job_file.string(), "prepare job description");
      ZEST_CHECK(saved == job, printable(job_file.string()), ": an unfinished prepare into ", printable(out),
                 " was started with other options or another ", listing_noun, "; rerun it with the same ones to ",
                 "continue, or remove ", printable(work_.string()), " to start over");
    } else {
      fs::create_directories(work_ / "pieces");
      std::ofstream(work_ / "job.json.tmp") << job;
      fs::rename(work_ / "job.json.tmp", job_file);
    }
    for (const auto& entry : fs::directory_iterator(work_ / "pieces"))  // a piece cut off by a kill
      if (entry.path().extension() == ".tmp") fs::remove(entry.path());
  }
  comm_.barrier();
}

PieceCount PrepareWork::write_pieces(int64_t total, int64_t per_piece, std::ostream& log,
                                     const std::function<void(int64_t, int64_t, const std::string&)>& write_piece) {
  PieceCount count;
  count.total = (total + per_piece - 1) / per_piece;
  const auto started = std::chrono::steady_clock::now();
  int64_t done = 0;
  for (int64_t p = comm_.rank(); p < count.total; p += comm_.size()) {
    const std::string path = piece_path(p);
    if (fs::exists(path)) {
      ++count.reused;
      continue;
    }
    const int64_t first = p * per_piece, last = std::min(total, first + per_piece);
    write_piece(first, last, path);
    done += last - first;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    log << "prepare" << (comm_.size() > 1 ? str(" [rank ", comm_.rank(), "]") : std::string()) << ": piece " << p + 1
        << "/" << count.total << ", " << done << " " << items_noun_ << " in " << one_decimal(seconds) << " s ("
        << one_decimal(done / std::max(seconds, 1e-3)) << " " << items_noun_ << "/s)\n"
        << std::flush;
  }
  comm_.barrier();  // every piece is finished
  return count;
}

void PrepareWork::throw_if_interrupted_preparing(const std::string& item) const {
  throw_if_interrupted(str("preparing ", item, " (finished pieces are kept in ", work_.string(),
                           "; rerun the same command to continue)"));
}

void PrepareWork::publish(const std::function<void(const fs::path& staging)>& write_dataset) {
  if (comm_.rank() == 0) {
    const fs::path staging = work_ / "dataset";
    fs::remove_all(staging);
    fs::create_directories(staging);
    write_dataset(staging);
    throw_if_interrupted("writing the dataset");
    const fs::path out(out_);
    if (fs::exists(out)) fs::remove(out);  // the empty folder the user made
    if (out.has_parent_path()) fs::create_directories(out.parent_path());
    fs::rename(staging, out);
    fs::remove_all(work_);
  }
  comm_.barrier();
}

void PrepareWork::fail_nothing_usable(const std::string& source, size_t listed, const std::string& noun,
                                      const std::vector<SkippedFile>& skipped) const {
  fs::remove_all(work_);
  const std::string why = skipped.empty() ? "" : " (" + skipped.front().file + ": " + skipped.front().reason + ")";
  ZEST_FAIL(printable(source), ": none of the ", listed, " ", noun, " could be used", why);
}

void write_skipped_list(const fs::path& staging, const std::vector<SkippedFile>& skipped) {
  std::ofstream list(staging / "skipped.txt");
  for (const SkippedFile& s : skipped) list << printable(s.file) << "\t" << printable(s.reason, 1000) << "\n";
  ZEST_CHECK(list.good(), (staging / "skipped.txt").string(), ": write failed");
}

}  // namespace zest
