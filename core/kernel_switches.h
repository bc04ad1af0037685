// Kernel switches: process-wide choices of implementation (a fused kernel on or off, the attention backend)
// that benchmarks compare without rebuilding. They are the run file's [engine.kernels] table: one list
// (kernel_switch_specs(), kernel_switches.cpp) gives each its key, environment variable, default and doc,
// and from it come the table's reading, writing and docs (a FieldTable), the checkpoint manifest's and
// `zest bench`'s record, and the registry below, which the kernels read. `zest train` and `zest bench` set
// the registry once from the run file (KernelSwitches::apply); an environment variable that is set still
// wins, with one line saying what it changed. Without a run file (tests, `zest sample`) the switches start
// at their defaults, or at the environment's value where a variable is set; tests flip them with set().
//
// Adding a switch: an entry in kernel_switch_specs(), and `kernel_switch("key").enabled()` where the kernel
// is chosen (docs/design.md, "How to add a kernel switch").
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zest {

template <typename C>
class FieldTable;  // core/field_table.h

struct KernelSwitchSpec {
  std::string key;                   // [engine.kernels] key
  std::string variable;              // environment variable that overrides it
  std::string default_value;         // "true"/"false" for an on/off switch, else one of `choices`
  std::vector<std::string> choices;  // empty: an on/off switch
  std::string doc;                   // one line: the TOML comment
  std::string reference;             // docs text ("" = doc)

  bool is_on_off() const { return choices.empty(); }
};

// zest's switches, in [engine.kernels] order.
const std::vector<KernelSwitchSpec>& kernel_switch_specs();

// The values of a set of switches, as [engine.kernels] gives them: an on/off switch's state, a choice's name.
struct KernelsConfig {
  std::map<std::string, bool> on;
  std::map<std::string, std::string> choice;

  KernelsConfig();  // zest's defaults
  explicit KernelsConfig(const std::vector<KernelSwitchSpec>& specs);
  bool operator==(const KernelsConfig&) const = default;
};

class KernelSwitch {
 public:
  // At the spec's default, or at its environment variable's value where that is set (and valid).
  explicit KernelSwitch(const KernelSwitchSpec& spec);

  const KernelSwitchSpec& spec() const { return spec_; }
  bool enabled() const;  // an on/off switch's state
  void set(bool on);
  std::string value() const;  // "true"/"false", or the choice
  void set_value(const std::string& value);

 private:
  KernelSwitchSpec spec_;
  std::atomic<int> value_;  // on/off: 0 or 1; a choice: its index
};

// A set of switches over one spec list: zest's (process()), or a test's own.
class KernelSwitches {
 public:
  // `table`: the dotted table the switches are read from, for messages ("engine.kernels").
  KernelSwitches(std::vector<KernelSwitchSpec> specs, std::string table);
  ~KernelSwitches();
  static KernelSwitches& process();  // zest's, over kernel_switch_specs()

  KernelSwitch& at(std::string_view key);  // refused for a key the list lacks
  const std::vector<KernelSwitchSpec>& specs() const { return specs_; }
  // The [kernels] table of these switches (read into a KernelsConfig(specs())).
  const FieldTable<KernelsConfig>& fields() const { return *fields_; }
  KernelsConfig current() const;

  // Sets every switch to `config`'s value, except those whose environment variable is set: the variable's
  // value wins, and where it differs from `config`'s a line says so ("ZEST_QK_NORM_ROPE=0 overrides
  // [engine.kernels] qk_norm_rope = true"), appended to `overrides`. An invalid value of a variable is an
  // error naming it. Returns the values now in force.
  KernelsConfig apply(const KernelsConfig& config, std::vector<std::string>* overrides = nullptr);

 private:
  std::vector<KernelSwitchSpec> specs_;
  std::string table_;
  std::deque<KernelSwitch> switches_;  // a deque: atomics do not move
  std::unique_ptr<FieldTable<KernelsConfig>> fields_;
};

// zest's switch `key` (KernelSwitches::process().at); callers keep the reference (a static) on hot paths.
KernelSwitch& kernel_switch(std::string_view key);
// The [engine.kernels] table.
const FieldTable<KernelsConfig>& kernels_fields();

}  // namespace zest
