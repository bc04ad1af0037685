// Checkpoint saving: snapshot, write (inline or on a background thread), and the collective commit
// (see save.h; the folder protocol is in directory.cpp).
#include "checkpoint/save.h"

#include "checkpoint/directory.h"
#include "checkpoint/manifest_check.h"
#include "checkpoint/rank_agreement.h"
#include "checkpoint/save_phase.h"
#include "checkpoint/snapshot.h"
#include "core/check.h"
#include "core/field_table.h"
#include "engine/engine_config.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

namespace zest::checkpoint {

struct Saver::Pending {
  Manifest manifest;  // everything but the files (rank 0 completes it at commit)
  std::string root;
  int keep_last = 0;
  bool commits = false;  // rank 0, or a node's rank with a folder of its own (SaveRequest::own_folder)
  std::string path;   // the committed folder name
  std::thread worker; // asynchronous write, if any
  std::atomic<bool> written{false};
  FileRecord record;  // this rank's file, valid once written
  std::string error;  // this rank's write error, valid once written

  void join() {
    if (worker.joinable()) worker.join();
  }
};

SaveRequest SaveRequest::from_config(const CheckpointConfig& config) {
  SaveRequest request;
  request.dir = config.dir;
  request.keep_last = config.keep_last;
  request.async = config.async;
  return request;
}

Manifest describe_state(const EngineState& state, const SaveRequest& request) {
  const StepCounters& c = state.counters;
  Manifest m;
  m.model_name = request.model_name;
  m.model_config = request.model_config;
  m.config_hash = config_hash(request.model_name, request.model_config);
  m.step = request.step >= 0 ? request.step : c.step;
  m.world_size = state.world_size;
  m.stage = state.stage;
  m.precision = to_string(state.configs.engine.precision);
  for (const UnitShardLayout& unit : state.units) m.units.push_back(unit.layout);
  m.kinds = state.shard_names();  // master, the optimizer's states, then the EMA when kept
  m.ema = state.configs.ema;
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  config["engine"] = record_json(engine_fields().values(state.configs.engine));
  m.config_json = config.dump();
  m.optimizer = state.configs.optimizer;
  m.optimizer_step = c.optimizer_step;
  m.scheduler = state.configs.scheduler;
  m.lr = c.lr;
  m.loss_scale_enabled = c.loss_scale_enabled;
  m.loss_scaler = c.loss_scaler;
  m.skipped_total = c.skipped_total;
  m.extra_json = request.extra_json;
  return m;
}

Saver::Saver() = default;

Saver::~Saver() {
  if (pending_) pending_->join();
}

namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string Saver::save(StatefulEngine& engine, const SaveRequest& request) {
  Communicator& comm = engine.comm();
  const auto started = std::chrono::steady_clock::now();
  SaveFigures figures;
  if (pending_) {
    figures.waited_for_previous = !pending_->written.load();
    figures.previous_step = pending_->manifest.step;
  }
  wait(comm);
  figures.waited_ms = ms_since(started);
  ZEST_CHECK(!request.dir.empty(), "checkpoint save: no folder given (checkpoint.dir)");
  auto pending = std::make_unique<Pending>();
  pending->root = request.dir;
  pending->keep_last = request.keep_last;
  pending->commits = comm.rank() == 0 || request.own_folder;
  // Validates the caller's JSON and the layout on every rank before anything touches the disk.
  EngineState state;
  raise_if_any(comm, capture_error([&] {
    state = engine.state();
    pending->manifest = describe_state(state, request);
    Manifest probe = pending->manifest;
    probe.rank_extra_json = {request.rank_extra_json};
    for (int r = 0; r < comm.size(); ++r) probe.files.push_back({rank_file_name(r), 0, 0});
    validate_manifest(probe, "the checkpoint being saved to " + request.dir);
    to_json_text(probe);
  }));
  pending->manifest.rank_extra_json = allgather_strings(comm, request.rank_extra_json);
  const int64_t step = pending->manifest.step;
  pending->path = (std::filesystem::path(request.dir) / step_dir_name(step)).string();
  std::string tmp = (std::filesystem::path(request.dir) / (step_dir_name(step) + ".tmp")).string();
  raise_if_any(comm, pending->commits ? capture_error([&] { tmp = prepare_tmp_dir(request.dir, step); }) : "");

  const RankFileIdentity identity{comm.rank(), comm.size(), step};
  const std::string file = (std::filesystem::path(tmp) / rank_file_name(comm.rank())).string();
  // Asynchronous: the slices are copied into the reused host staging (on a GPU, queued on a side stream:
  // the host returns at once and the writer waits for the copy). Synchronous: views, written now.
  SideStream::Mark copied;
  auto snapshot = std::make_shared<RankSnapshot>(request.async ? staging_.stage(state, copied)
                                                               : snapshot_state(state, /*copy=*/false));
  Pending* p = pending.get();
  auto write = [p, snapshot, file, identity, copied] {
    p->error = capture_error([&] {
      copied.wait_host();
      p->record = write_rank_file(*snapshot, file, identity);
    });
    p->written.store(true);
  };
  pending_ = std::move(pending);
  if (request.async) {
    p->worker = std::thread(write);
    figures.staging_bytes = staging_.bytes();
    figures.stall_ms = ms_since(started);
    last_ = figures;
    return p->path;
  }
  write();
  const std::string path = p->path;  // commit() releases the pending record
  commit(comm);
  figures.stall_ms = ms_since(started);
  last_ = figures;
  return path;
}

bool Saver::poll(Communicator& comm) {
  if (!pending_) return false;
  const bool everyone_written = !comm.any(!pending_->written.load());
  if (everyone_written) commit(comm);
  return everyone_written;
}

void Saver::wait(Communicator& comm) {
  if (!pending_) return;
  pending_->join();
  commit(comm);
}

void Saver::commit(Communicator& comm) {
  pending_->join();
  const std::unique_ptr<Pending> p = std::move(pending_);  // a failed commit is not retried
  raise_if_any(comm, p->error);
  const auto records = allgather_int64(comm, {static_cast<int64_t>(p->record.bytes),
                                              static_cast<int64_t>(p->record.xxh64)});
  std::string error;
  if (p->commits) {  // every committing rank builds the same manifest from the same records
    error = capture_error([&] {
      Manifest& m = p->manifest;
      for (int r = 0; r < comm.size(); ++r)
        m.files.push_back({rank_file_name(r), static_cast<uint64_t>(records[2 * r]),
                           static_cast<uint64_t>(records[2 * r + 1])});
      validate_manifest(m, "the manifest of " + p->path);  // never write one that readers would refuse
      const std::string tmp = p->path + ".tmp";
      write_manifest(tmp, m);
      reach_save_phase(SavePhase::manifest_written, 0, m.step);
      commit_tmp_dir(p->root, m.step);
      apply_retention(p->root, p->keep_last);
    });
  }
  raise_if_any(comm, error);  // also the barrier: no rank returns before the commit
}

std::string save(StatefulEngine& engine, const SaveRequest& request) {
  SaveRequest sync = request;
  sync.async = false;
  Saver saver;
  return saver.save(engine, sync);
}

}  // namespace zest::checkpoint
