// DataLoader: batch planning in order under one lock (so batches never depend on thread timing),
// building outside it, an ordered hand-over to next(), and exact position save/restore.
#include "data/loader.h"

#include "data/seed.h"
#include "core/check.h"

#include <c10/util/Exception.h>

#include <system_error>

namespace zest {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DistributedSampler sampler,
                       const LoaderOptions& options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options) {
  ZEST_CHECK(dataset_ != nullptr, "DataLoader: no dataset");
  ZEST_CHECK(sampler_.dataset_size() == dataset_->size(), "DataLoader: the sampler covers ", sampler_.dataset_size(),
             " samples but the dataset ", dataset_->dir(), " has ", dataset_->size());
  ZEST_CHECK(options_.batch_size >= 1, "DataLoader: batch_size ", options_.batch_size, " must be >= 1");
  ZEST_CHECK(options_.num_workers >= 0, "DataLoader: num_workers ", options_.num_workers, " must be >= 0");
  capacity_ = options_.prefetch_batches > 0 ? options_.prefetch_batches : std::max(2, 2 * options_.num_workers);
  start_ = sampler_.state();
  start_workers();
}

DataLoader::~DataLoader() { stop_workers(); }

DataLoader::Planned DataLoader::plan_locked() {
  Planned p;
  p.number = planned_++;
  for (int64_t i = 0; i < options_.batch_size; ++i) {
    const int64_t epoch = sampler_.state().epoch;
    const int64_t index = sampler_.next();
    p.indices.push_back(index);
    p.seeds.push_back(mix_seed(options_.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index)));
  }
  return p;
}

DataLoader::Built DataLoader::build(const Planned& planned) const {
  Built built;
  size_t i = 0;
  try {
    std::vector<Sample> samples;
    samples.reserve(planned.indices.size());
    for (; i < planned.indices.size(); ++i) samples.push_back(dataset_->get(planned.indices[i], planned.seeds[i]));
    built.batch = collate(samples, options_.pin_memory);
  } catch (const std::exception& e) {
    // LibTorch's errors carry a C++ stack trace in what(); the message alone is what a user needs.
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    const std::string reason = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
    const std::string where = i < planned.indices.size()
                                  ? str("sample ", planned.indices[i], " at ", dataset_->where(planned.indices[i]))
                                  : std::string("collating the batch");
    try {
      ZEST_FAIL("data loader: ", where, ": ", reason);
    } catch (...) {
      built.error = std::current_exception();
    }
  }
  return built;
}

void DataLoader::worker_loop() {
  for (;;) {
    Planned planned;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [this] { return stop_ || planned_ - delivered_ < capacity_; });
      if (stop_) return;
      planned = plan_locked();
    }
    Built built = build(planned);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(planned.number, std::move(built));
    }
    ready_cv_.notify_all();
  }
}

void DataLoader::start_workers() {
  stop_ = false;
  try {
    for (int w = 0; w < options_.num_workers; ++w) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    // Without this the started threads would still be joinable when the loader unwinds: std::terminate.
    const size_t started = workers_.size();
    stop_workers();
    ZEST_FAIL("data loader: could start only ", started, " of ", options_.num_workers,
              " worker threads (data.num_workers): ", e.what(), "; use fewer workers");
  }
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

Sample DataLoader::next() {
  Built built;
  if (options_.num_workers == 0) {
    Planned planned;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      planned = plan_locked();
    }
    built = build(planned);
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_cv_.wait(lock, [this] { return ready_.count(delivered_) != 0; });
    auto node = ready_.extract(delivered_);
    built = std::move(node.mapped());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++delivered_;
  }
  work_cv_.notify_all();
  if (built.error) std::rethrow_exception(built.error);
  return std::move(built.batch);
}

SamplerPosition DataLoader::state(int64_t held_back) const {
  std::lock_guard<std::mutex> lock(mutex_);
  ZEST_CHECK(held_back >= 0 && held_back <= delivered_, "DataLoader: ", held_back, " batches held back of ",
             delivered_, " returned");
  const int64_t per_epoch = sampler_.samples_per_rank();
  const int64_t consumed =
      start_.epoch * per_epoch + start_.index + (delivered_ - held_back) * options_.batch_size;
  return {consumed / per_epoch, consumed % per_epoch};
}

GlobalPosition DataLoader::global_state(int64_t held_back) const { return sampler_.to_global(state(held_back)); }

void DataLoader::load_global_state(const GlobalPosition& position) { load_state(sampler_.from_global(position)); }

void DataLoader::load_state(const SamplerPosition& position) {
  stop_workers();
  sampler_.load_state(position);  // validates
  ready_.clear();
  planned_ = 0;
  delivered_ = 0;
  start_ = position;
  start_workers();
}

}  // namespace zest
