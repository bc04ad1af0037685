// The families' pipelines, built-ins first, and their lookups (see family_pipeline.h).
#include "pipelines/family_pipeline.h"

#include "core/check.h"
#include "models/registry.h"
#include "pipelines/motion_samples.h"
#include "pipelines/sd_samples.h"

namespace zest {
namespace {

void check_pipeline(const FamilyPipeline& p, const std::deque<FamilyPipeline>& registered) {
  ZEST_CHECK(is_model_family(p.family), "family pipeline '", p.family, "': no model family of that name (known: ",
             model_family_names(), "); register the family first");
  for (const FamilyPipeline& other : registered) {
    ZEST_CHECK(other.family != p.family, "family pipeline '", p.family, "': the family has one already");
    ZEST_CHECK(p.owns_folder || other.owns_folder, "family pipeline '", p.family, "': owns_folder is empty, as ",
               other.family, "'s is (one family at most takes the folders no other claims)");
  }
  ZEST_CHECK(p.sample != nullptr, "family pipeline '", p.family, "': sample is not set (`zest sample`)");
  ZEST_CHECK(p.validation != nullptr, "family pipeline '", p.family, "': validation is not set ([sample])");
}

std::deque<FamilyPipeline>& pipelines() {
  static std::deque<FamilyPipeline> all = [] {
    std::deque<FamilyPipeline> built_in;
    for (FamilyPipeline p : {motion_family_pipeline(), sd_family_pipeline()}) {  // a new family: one line here
      check_pipeline(p, built_in);
      built_in.push_back(std::move(p));
    }
    return built_in;
  }();
  return all;
}

}  // namespace

const std::deque<FamilyPipeline>& family_pipelines() { return pipelines(); }

const FamilyPipeline* find_family_pipeline(const std::string& family) {
  for (const FamilyPipeline& p : pipelines())
    if (p.family == family) return &p;
  return nullptr;
}

const FamilyPipeline& family_pipeline_for_folder(const std::filesystem::path& folder) {
  const FamilyPipeline* unclaimed = nullptr;
  for (const FamilyPipeline& p : pipelines()) {
    if (!p.owns_folder) unclaimed = &p;
    else if (p.owns_folder(folder)) return p;
  }
  ZEST_CHECK(unclaimed != nullptr, "--pretrained ", folder.string(), ": not a pipeline folder of any family that "
             "draws samples (", family_pipeline_names(), ")");
  return *unclaimed;
}

std::string family_pipeline_names() {
  std::string names;
  for (const FamilyPipeline& p : pipelines()) names += (names.empty() ? "" : ", ") + p.family;
  return names;
}

const FamilyPipeline& register_family_pipeline(FamilyPipeline pipeline) {
  std::deque<FamilyPipeline>& all = pipelines();
  check_pipeline(pipeline, all);
  all.push_back(std::move(pipeline));
  return all.back();
}

}  // namespace zest
