// Saving checkpoints: every rank writes its slices into DIR/step_N.tmp/, all ranks confirm, then rank 0
// writes the manifest, renames the folder to step_N/, replaces DIR/latest atomically and applies
// keep-last-K retention. Optionally asynchronous: slices are copied to host memory and written by a
// background thread while training continues; the commit happens at a later collective point.
//
//   checkpoint::Saver saver;
//   for (step...) { ...; saver.poll(engine.comm());                       // commits a finished async save
//                   if (step % every == 0) saver.save(engine, request); }  // waits for the previous one
//   saver.wait(engine.comm());
#pragma once

#include "checkpoint/checkpoint_config.h"
#include "checkpoint/manifest.h"
#include "checkpoint/snapshot_staging.h"
#include "comm/communicator.h"
#include "engine/engine_state.h"

#include <memory>
#include <optional>
#include <string>

namespace zest::checkpoint {

struct SaveRequest {
  std::string dir;                    // checkpoint root: DIR/step_N/ and DIR/latest
  int64_t step = -1;                  // -1: the engine's step count
  std::string model_name;             // identity checked by load()
  std::string model_config;           // the model's configuration text (TOML), checked by load()
  std::string extra_json = "{}";      // JSON object from rank 0 (data position, ...), returned by load()
  std::string rank_extra_json = "{}"; // this rank's JSON object (its RNG state, ...), returned by load()
  int keep_last = 0;                  // committed checkpoints kept (0 = all)
  bool async = false;
  // This rank prepares and commits a step folder of its own (with a copy of rank 0's manifest) for
  // the ranks of its node: [checkpoint] shared_fs = false on a node that does not see rank 0's `dir`.
  // Rank 0 always does.
  bool own_folder = false;

  // dir, keep_last and async from the [checkpoint] table.
  static SaveRequest from_config(const CheckpointConfig& config);
};

// How long the last save() kept its caller from training, and the host staging it copied into.
struct SaveFigures {
  double stall_ms = 0.0;        // the whole call: waiting for the previous save, snapshot, and (sync) write
  double waited_ms = 0.0;       // of which: waiting for the previous save's background write
  bool waited_for_previous = false;  // the previous save was still writing when this one was due
  int64_t previous_step = -1;   // its step, when it was
  int64_t staging_bytes = 0;    // the reused host staging (asynchronous saves; 0 otherwise)
};

class Saver {
 public:
  Saver();
  ~Saver();  // joins a running write; an uncommitted save stays step_N.tmp/ and is removed by the next save
  Saver(const Saver&) = delete;
  Saver& operator=(const Saver&) = delete;

  // Collective. Finishes a pending save first. Synchronous requests return after the commit;
  // asynchronous ones once the slices are copied. Returns the step folder's final path.
  std::string save(StatefulEngine& engine, const SaveRequest& request);
  // Collective, cheap (one small allreduce while a save is pending, nothing otherwise): commits the
  // pending asynchronous save when every rank has finished writing. True if it committed.
  bool poll(Communicator& comm);
  // Collective: waits for the pending save's writes and commits it.
  void wait(Communicator& comm);
  bool has_pending() const { return pending_ != nullptr; }
  // Asynchronous saves of a GPU engine copy its shard on a side stream: before the next optimizer update
  // (which overwrites the shard), the current stream must wait for that copy. Cheap; nothing otherwise.
  void order_before_update() { staging_.order_before_update(); }
  // Allocates the host staging of asynchronous saves now, rather than within the first save.
  // (Reads the engine's state: on a GPU a wait for the device.)
  void reserve_staging(StatefulEngine& engine) { staging_.reserve(engine.state()); }
  const SaveFigures& last_save() const { return last_; }
  int64_t staging_bytes() const { return staging_.bytes(); }

 private:
  struct Pending;
  void commit(Communicator& comm);
  std::unique_ptr<Pending> pending_;
  SnapshotStaging staging_;  // reused by every asynchronous save
  SaveFigures last_;
};

// Synchronous save (a Saver of one call). Collective; returns the committed step folder.
std::string save(StatefulEngine& engine, const SaveRequest& request);

// The manifest describing an engine's `state` (files are filled in at commit).
Manifest describe_state(const EngineState& state, const SaveRequest& request);

}  // namespace zest::checkpoint
