// FieldTable<Config>: the one statement of a config struct's TOML table. Each entry is a key with its
// member (or getter/setter), type, default, one-line doc, docs text and checks; from that list come
//   read     strict reading (wrong types, unknown keys with the nearest known one, checks, cross-field rules),
//   write    the TOML `zest config check` prints and run folders keep (every applicable key, with its doc),
//   values   the written keys as dotted key → TOML literal (diffs, records),
//   diff     the keys whose values differ between two configs,
//   record   the same values as a JSON object (checkpoint manifests, `zest bench`),
//   rows     the docs rows of docs/config_reference.md (`zest config reference`).
// A key added to a table is read, written, diffed, recorded and documented at once; docs/design.md
// ("How to add a config key") walks through it.
//
//   static const FieldTable<DataConfig> t = [] {
//     FieldTable<DataConfig> t("data", "training data", {{"path", "zest calls it dir"}});
//     t.text("dir", &DataConfig::dir, "dataset folder").required();
//     t.integer("batch_size", &DataConfig::batch_size, "samples per rank per micro-batch")
//         .at_least(1, "must be >= 1 (samples per rank per micro-batch)");
//     return t;
//   }();
//
// Reading assigns only the keys present, so a config is read into a default-constructed struct (or one whose
// defaults the caller set first). Order of reading one table: every value key (type errors), then the unknown
// keys of its sections and of the table, then the nested tables, then each key's checks in table order, then
// the table's rules (checks over several keys).
#pragma once

#include "core/config_reader.h"
#include "core/config_writer.h"

#include <nlohmann/json_fwd.hpp>

#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace zest {

// Thrown by a field's setter that refuses a value as read (e.g. betas of three values): the table's reader
// turns it into an error at the key.
struct FieldValueError {
  std::string message;
};

// One key's row in docs/config_reference.md.
struct FieldRow {
  std::string section;  // dotted table ("engine.offload")
  std::string key;
  std::string type;          // "int ≥ 1", "fp32 | bf16 | fp16"
  std::string default_text;  // a TOML literal, or words ("true when the table is present")
  std::string meaning;
};

// One written key: its dotted path and TOML literal.
struct FieldValue {
  std::string key;
  std::string toml;
};

// One key whose value differs; nullopt where the key is not written (it does not apply there).
struct FieldDifference {
  std::string key;
  std::optional<std::string> a, b;
};

// The differing keys of two value lists, in the order of `a` (then the keys only `b` has).
std::vector<FieldDifference> diff_values(const std::vector<FieldValue>& a, const std::vector<FieldValue>& b);

// The values (FieldTable::values with no prefix) as one JSON object, dotted keys nested, in table order: a
// config's record.
nlohmann::ordered_json record_json(const std::vector<FieldValue>& values);

// The docs table of `rows`: | section | key | type | default | meaning |.
std::string reference_markdown(const std::vector<FieldRow>& rows);

// TOML literals of the value types fields hold (ConfigWriter writes the same).
std::string toml_literal(bool v);
std::string toml_literal(int v);
std::string toml_literal(int64_t v);
std::string toml_literal(double v);
std::string toml_literal(const std::string& v);
std::string toml_literal(const std::vector<int>& v);
std::string toml_literal(const std::vector<int64_t>& v);
std::string toml_literal(const std::vector<double>& v);
std::string toml_literal(const std::vector<std::string>& v);

// Docs text of a number in a type column ("1", "0.5", "1e-08").
std::string reference_number(double v);

template <typename C>
class FieldTable;

namespace field_detail {

template <typename T>
struct is_vector : std::false_type {};
template <typename E>
struct is_vector<std::vector<E>> : std::true_type {};

template <typename T>
std::string base_type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_integral_v<T>) return "int";
  else if constexpr (std::is_floating_point_v<T>) return "float";
  else if constexpr (std::is_same_v<T, std::string>) return "string";
  else if constexpr (is_vector<T>::value) return "[" + base_type_name<typename T::value_type>() + "]";
  else return "?";
}

inline std::string join(const std::vector<std::string>& names, const std::string& separator) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : separator) + name;
  return out;
}

}  // namespace field_detail

// One entry of a FieldTable<C> (type-erased; built by FieldTable's typed builders).
template <typename C>
struct Field {
  using Predicate = std::function<bool(const C&)>;
  using Message = std::function<std::string(const C&)>;
  struct Check {
    Predicate holds;
    Message message;
  };

  std::string key;
  std::string section;  // "" = the table itself; else one of the table's sections ([engine.offload])
  std::string type;
  std::string default_text;
  std::string doc;        // the TOML comment
  std::string reference;  // the docs' meaning ("" = doc)

  // A value: reads the key when present (type errors at the key), and its TOML literal.
  std::function<void(ConfigTable& table, C& config)> read;
  std::function<std::string(const C&)> literal;
  // A nested table (e.g. [engine.loss_scale]) instead of a value.
  struct Nested {
    std::function<void(ConfigTable& table, C& config)> read;  // `table` is the nested table
    std::function<void(const C&, ConfigWriter& out)> write;   // into its own table
    std::function<void(const C&, const std::string& prefix, std::vector<FieldValue>& out)> values;
    std::function<void(const std::string& prefix, std::vector<FieldRow>& out)> rows;
    std::function<void(ConfigTable& parent, C& config)> before;      // optional, before reading
    std::function<void(ConfigTable& table, const C& config)> after;  // optional, after reading
    std::string doc;
  };
  std::optional<Nested> nested;

  Predicate written;                // written (and diffed, recorded) only where it holds; null = always
  Predicate applies;                // null = always; where it fails, the key must be absent
  Message not_applies;              // the error when it is present anyway
  std::vector<Check> checks;        // value checks, in order, after every key is read
  bool has_range_type = false;      // `type` set by a range check (an explicit type() wins)
  bool has_explicit_type = false;

  bool is_written(const C& c) const { return (!written || written(c)) && (!applies || applies(c)); }
};

// Chained modifiers of the entry just added; T is the value type (void for a nested table).
template <typename C, typename T>
class FieldBuilder {
 public:
  using Predicate = typename Field<C>::Predicate;
  using Message = typename Field<C>::Message;

  FieldBuilder(Field<C>& field, std::function<T(const C&)> get) : field_(field), get_(std::move(get)) {}

  // A check over the whole config (other keys too); the message may quote values.
  FieldBuilder& check(Predicate holds, Message message) {
    field_.checks.push_back({std::move(holds), std::move(message)});
    return *this;
  }
  FieldBuilder& check(Predicate holds, const std::string& message) {
    return check(std::move(holds), [message](const C&) { return message; });
  }
  // A check of this key's value alone.
  template <typename Fn>
  FieldBuilder& check_value(Fn holds, const std::string& message) {
    auto get = get_;
    return check([get, holds](const C& c) { return holds(get(c)); }, message);
  }
  // value >= lo (finite for a float); docs type "int ≥ lo".
  FieldBuilder& at_least(double lo, const std::string& message) {
    auto get = get_;
    range_type(field_detail::base_type_name<T>() + " ≥ " + reference_number(lo));
    return check([get, lo](const C& c) { return is_finite(get(c)) && static_cast<double>(get(c)) >= lo; }, message);
  }
  // value > lo, finite; docs type "float > lo".
  FieldBuilder& above(double lo, const std::string& message) {
    auto get = get_;
    range_type(field_detail::base_type_name<T>() + " > " + reference_number(lo));
    return check([get, lo](const C& c) { return is_finite(get(c)) && static_cast<double>(get(c)) > lo; }, message);
  }
  // lo <= value <= hi; docs type "int lo–hi" / "float in [lo, hi]".
  template <typename M>
  FieldBuilder& between(double lo, double hi, M message) {
    auto get = get_;
    if constexpr (std::is_integral_v<T>)
      range_type("int " + reference_number(lo) + "–" + reference_number(hi));
    else
      range_type("float in [" + reference_number(lo) + ", " + reference_number(hi) + "]");
    return check([get, lo, hi](const C& c) { return static_cast<double>(get(c)) >= lo && static_cast<double>(get(c)) <= hi; },
                 message);
  }
  // The key only means something where `applies` holds: written only there, and an error when the file
  // sets it elsewhere (read and type-checked all the same).
  template <typename M>
  FieldBuilder& only_with(Predicate applies, M message) {
    field_.applies = std::move(applies);
    if constexpr (std::is_convertible_v<M, std::string>)
      field_.not_applies = [text = std::string(message)](const C&) { return text; };
    else
      field_.not_applies = std::move(message);
    return *this;
  }
  // Written (diffed, recorded) only where `written` holds; accepted everywhere.
  FieldBuilder& written_when(Predicate written) {
    field_.written = std::move(written);
    return *this;
  }
  FieldBuilder& type(const std::string& text) {
    field_.type = text;
    field_.has_explicit_type = true;
    return *this;
  }
  FieldBuilder& default_text(const std::string& text) {
    field_.default_text = text;
    return *this;
  }
  // The docs' longer meaning (the one-line doc stays the TOML comment).
  FieldBuilder& reference(const std::string& text) {
    field_.reference = text;
    return *this;
  }
  // In one of the table's sections (FieldTable::section).
  FieldBuilder& in(const std::string& section) {
    field_.section = section;
    return *this;
  }

 private:
  template <typename V>
  static bool is_finite(const V& v) {
    if constexpr (std::is_floating_point_v<V>) return std::isfinite(v);
    else return true;
  }
  void range_type(const std::string& text) {
    if (field_.has_explicit_type || field_.has_range_type) return;
    field_.type = text;
    field_.has_range_type = true;
  }

  Field<C>& field_;
  std::function<T(const C&)> get_;
};

// Modifiers of a nested table.
template <typename C, typename S>
class NestedBuilder {
 public:
  using Predicate = typename Field<C>::Predicate;

  NestedBuilder(Field<C>& field, S C::*member) : field_(field), member_(member) {}

  // Read and written only where `applies` holds; elsewhere the table must be absent.
  template <typename M>
  NestedBuilder& only_with(Predicate applies, M message) {
    field_.applies = std::move(applies);
    if constexpr (std::is_convertible_v<M, std::string>)
      field_.not_applies = [text = std::string(message)](const C&) { return text; };
    else
      field_.not_applies = std::move(message);
    return *this;
  }
  // An [x] table turns x on: `enabled` starts as whether the table is present (its key can still say so).
  NestedBuilder& enabled_by_presence(bool S::*enabled) {
    field_.nested->before = [enabled, member = member_, key = field_.key](ConfigTable& parent, C& c) {
      (c.*member).*enabled = parent.has(key);
    };
    return *this;
  }
  // Runs after the nested table is read and checked (e.g. what this machine supports).
  NestedBuilder& after_read(std::function<void(ConfigTable&, const S&)> fn) {
    field_.nested->after = [fn = std::move(fn), member = member_](ConfigTable& table, const C& c) { fn(table, c.*member); };
    return *this;
  }

 private:
  Field<C>& field_;
  S C::*member_;
};

template <typename C>
class FieldTable {
 public:
  using Predicate = typename Field<C>::Predicate;
  using Rules = std::function<void(ConfigTable&, C&)>;

  // `name`: the table's key in its parent ("engine"; "" for a document root); `doc`: the comment above it;
  // `hints`: foreign spellings and what zest calls them (e.g. DeepSpeed's names), used for unknown keys.
  FieldTable(std::string name, std::string doc, std::map<std::string, std::string> hints = {})
      : name_(std::move(name)), doc_(std::move(doc)), hints_(std::move(hints)) {}

  const std::string& name() const { return name_; }
  const std::string& doc() const { return doc_; }
  const std::deque<Field<C>>& fields() const { return fields_; }

  // A sub-table whose keys are fields of this struct ([engine.offload]); fields go in with .in(name).
  void section(const std::string& name, const std::string& doc, std::map<std::string, std::string> hints = {}) {
    sections_.push_back({name, doc, std::move(hints)});
  }
  // Checks over several keys, after each key's own: e.g. "offloading needs stage >= 1".
  void rules(Rules rules) { rules_.push_back(std::move(rules)); }

  // ---- typed entries: a member pointer, or a getter and a setter ----
  template <typename T>
  FieldBuilder<C, T> value(const std::string& key, std::function<T(const C&)> get, std::function<void(C&, T)> set,
                           const std::string& doc) {
    return add<T>(key, get, doc, [key, set](ConfigTable& t, C& c) {
      if (std::optional<T> v = t.get_optional<T>(key)) set(c, std::move(*v));
    });
  }
  template <typename T>
  FieldBuilder<C, T> value(const std::string& key, T C::*member, const std::string& doc) {
    return value<T>(key, getter(member), setter(member), doc);
  }
  FieldBuilder<C, bool> boolean(const std::string& key, bool C::*member, const std::string& doc) {
    return value<bool>(key, member, doc);
  }
  template <typename I>
  FieldBuilder<C, I> integer(const std::string& key, I C::*member, const std::string& doc) {
    static_assert(std::is_same_v<I, int> || std::is_same_v<I, int64_t>);
    return value<I>(key, member, doc);
  }
  FieldBuilder<C, double> number(const std::string& key, double C::*member, const std::string& doc) {
    return value<double>(key, member, doc);
  }
  FieldBuilder<C, std::string> text(const std::string& key, std::string C::*member, const std::string& doc) {
    return value<std::string>(key, member, doc);
  }
  template <typename E>
  FieldBuilder<C, std::vector<E>> list(const std::string& key, std::vector<E> C::*member, const std::string& doc) {
    return value<std::vector<E>>(key, member, doc);
  }
  // A required string (no default): absent is an error naming the key.
  FieldBuilder<C, std::string> required_text(const std::string& key, std::string C::*member, const std::string& doc) {
    auto builder = add<std::string>(key, getter(member), doc, [key, member](ConfigTable& t, C& c) {
      c.*member = t.required<std::string>(key);
    });
    return builder.default_text("**required**");
  }
  // A path: relative to the file that set it (ConfigTable::get_path); docs type "path".
  FieldBuilder<C, std::string> path(const std::string& key, std::string C::*member, const std::string& doc) {
    auto builder = add<std::string>(key, getter(member), doc, [key, member](ConfigTable& t, C& c) {
      if (t.has(key)) c.*member = t.get_path(key, c.*member);
      t.mark_known(key);
    });
    return builder.type("path");
  }
  // A string restricted to `allowed`; docs type "a | b | c".
  FieldBuilder<C, std::string> choice(const std::string& key, std::string C::*member,
                                      const std::vector<std::string>& allowed, const std::string& doc) {
    return choice(key, getter(member), setter(member), allowed, doc);
  }
  FieldBuilder<C, std::string> choice(const std::string& key, std::function<std::string(const C&)> get,
                                      std::function<void(C&, std::string)> set, const std::vector<std::string>& allowed,
                                      const std::string& doc) {
    auto builder = add<std::string>(key, get, doc, [key, get, set, allowed](ConfigTable& t, C& c) {
      if (t.has(key)) set(c, t.get_choice(key, get(c), allowed));
      t.mark_known(key);
    });
    builder.default_text(get(C{}));  // a name of the type column, unquoted
    return builder.type(field_detail::join(allowed, " | "));
  }
  // An enum spelled to_string(v) (found by ADL) for v in `values`; written as that string.
  template <typename E, size_t N>
  FieldBuilder<C, E> enumeration(const std::string& key, E C::*member, const E (&values)[N], const std::string& doc) {
    return enumeration<E, N>(key, getter(member), setter(member), values, doc);
  }
  template <typename E, size_t N>
  FieldBuilder<C, E> enumeration(const std::string& key, std::function<E(const C&)> get, std::function<void(C&, E)> set,
                                 const E (&values)[N], const std::string& doc) {
    std::vector<E> all(values, values + N);
    std::vector<std::string> names;
    for (const E v : all) names.emplace_back(to_string(v));
    Field<C>& f = fields_.emplace_back();
    f.key = key;
    f.doc = doc;
    f.type = field_detail::join(names, " | ");
    f.has_explicit_type = true;
    f.read = [key, get, set, all](ConfigTable& t, C& c) {
      if (!t.has(key)) return t.mark_known(key);
      std::vector<std::string> allowed;
      for (const E v : all) allowed.emplace_back(to_string(v));
      const std::string chosen = t.get_choice(key, to_string(get(c)), allowed);
      for (const E v : all)
        if (chosen == to_string(v)) set(c, v);
    };
    f.literal = [get](const C& c) { return toml_literal(std::string(to_string(get(c)))); };
    f.default_text = to_string(get(C{}));  // a name of the type column, unquoted
    return FieldBuilder<C, E>(f, get);
  }
  // A value that may be unset (written only when set).
  template <typename T>
  FieldBuilder<C, T> optional(const std::string& key, std::optional<T> C::*member, const std::string& doc) {
    Field<C>& f = fields_.emplace_back();
    f.key = key;
    f.doc = doc;
    f.type = field_detail::base_type_name<T>();
    f.read = [key, member](ConfigTable& t, C& c) {
      if (std::optional<T> v = t.get_optional<T>(key)) c.*member = *v;
    };
    f.literal = [member](const C& c) { return toml_literal((c.*member).value()); };
    f.written = [member](const C& c) { return (c.*member).has_value(); };
    f.default_text = "unset";
    return FieldBuilder<C, T>(f, [member](const C& c) { return (c.*member).value_or(T{}); });
  }
  // A nested table of another struct ([engine.loss_scale] of EngineConfig::loss_scale).
  template <typename S>
  NestedBuilder<C, S> nested(const std::string& key, S C::*member, const FieldTable<S>& table) {
    Field<C>& f = fields_.emplace_back();
    f.key = key;
    f.doc = table.doc();
    const FieldTable<S>* sub = &table;  // tables are static: they outlive every use
    typename Field<C>::Nested n;
    n.doc = table.doc();
    n.read = [sub, member](ConfigTable& t, C& c) { sub->read(t, c.*member); };
    n.write = [sub, member](const C& c, ConfigWriter& out) { sub->write_into(c.*member, out); };
    n.values = [sub, member](const C& c, const std::string& prefix, std::vector<FieldValue>& out) {
      sub->collect_values(c.*member, prefix, out);
    };
    n.rows = [sub](const std::string& prefix, std::vector<FieldRow>& out) { sub->collect_rows(prefix, out); };
    f.nested = std::move(n);
    return NestedBuilder<C, S>(f, member);
  }

  // ---- what the table does ----

  // Reads `table` into `config` strictly (see the top of this file).
  void read(ConfigTable& table, C& config) const {
    std::map<std::string, ConfigTable> sections;
    for (const Section& s : sections_) sections.emplace(s.name, table.table(s.name));
    for (const Field<C>& f : fields_) {
      if (f.nested) {
        table.table(f.key);  // known, and a table (not a value) if present
        continue;
      }
      ConfigTable& where = f.section.empty() ? table : sections.at(f.section);
      try {
        f.read(where, config);
      } catch (const FieldValueError& e) {
        where.fail(f.key, e.message);
      }
    }
    for (const Section& s : sections_) sections.at(s.name).reject_unknown_keys(s.hints);
    table.reject_unknown_keys(hints_);
    for (const Field<C>& f : fields_) {
      if (!f.nested) continue;
      if (f.applies && !f.applies(config)) {
        if (table.has(f.key)) table.fail(f.key, f.not_applies(config));
        continue;
      }
      read_nested(table, f, config);
    }
    for (const Field<C>& f : fields_) {
      if (f.nested) continue;
      ConfigTable& where = f.section.empty() ? table : sections.at(f.section);
      for (const auto& check : f.checks)
        if (!check.holds(config)) where.fail(f.key, check.message(config));
      if (f.applies && !f.applies(config) && where.has(f.key)) where.fail(f.key, f.not_applies(config));
    }
    for (const Rules& rule : rules_) rule(table, config);
  }
  C read(ConfigTable& table) const {
    C config;
    read(table, config);
    return config;
  }

  // Writes [name] (with its doc) into `out`, then the applicable keys and tables.
  void write(const C& config, ConfigWriter& out) const { write_into(config, out.table(name_, doc_)); }
  void write_into(const C& config, ConfigWriter& out) const {
    std::map<std::string, ConfigWriter*> sections;
    for (const Field<C>& f : fields_) {
      if (!f.is_written(config)) continue;
      if (f.nested) {
        f.nested->write(config, out.table(f.key, f.nested->doc));
        continue;
      }
      ConfigWriter* target = &out;
      if (!f.section.empty()) {
        auto [it, added] = sections.emplace(f.section, nullptr);
        if (added) it->second = &out.table(f.section, section_doc(f.section));
        target = it->second;
      }
      target->set_literal(f.key, f.literal(config), f.doc);
    }
  }

  // The written keys as "prefix.key" → TOML literal, in table order (nested tables after their parent's keys).
  std::vector<FieldValue> values(const C& config, const std::string& prefix = "") const {
    std::vector<FieldValue> out;
    collect_values(config, prefix, out);
    return out;
  }
  std::vector<FieldDifference> diff(const C& a, const C& b, const std::string& prefix = "") const {
    return diff_values(values(a, prefix), values(b, prefix));
  }
  // Docs rows, `prefix` being this table's dotted name.
  std::vector<FieldRow> rows(const std::string& prefix) const {
    std::vector<FieldRow> out;
    collect_rows(prefix, out);
    return out;
  }

  void collect_values(const C& config, const std::string& prefix, std::vector<FieldValue>& out) const {
    for (const Field<C>& f : fields_) {
      if (f.nested || !f.is_written(config)) continue;
      out.push_back({dotted(dotted(prefix, f.section), f.key), f.literal(config)});
    }
    for (const Field<C>& f : fields_)
      if (f.nested && f.is_written(config)) f.nested->values(config, dotted(prefix, f.key), out);
  }
  void collect_rows(const std::string& prefix, std::vector<FieldRow>& out) const {
    for (const Field<C>& f : fields_) {
      if (f.nested) continue;
      out.push_back({dotted(prefix, f.section), f.key, f.type, f.default_text, f.reference.empty() ? f.doc : f.reference});
    }
    for (const Field<C>& f : fields_)
      if (f.nested) f.nested->rows(dotted(prefix, f.key), out);
  }

 private:
  struct Section {
    std::string name;
    std::string doc;
    std::map<std::string, std::string> hints;
  };

  static std::string dotted(const std::string& prefix, const std::string& key) {
    if (prefix.empty()) return key;
    if (key.empty()) return prefix;
    return prefix + "." + key;
  }
  template <typename T>
  static std::function<T(const C&)> getter(T C::*member) {
    return [member](const C& c) { return c.*member; };
  }
  template <typename T>
  static std::function<void(C&, T)> setter(T C::*member) {
    return [member](C& c, T v) { c.*member = std::move(v); };
  }
  std::string section_doc(const std::string& name) const {
    for (const Section& s : sections_)
      if (s.name == name) return s.doc;
    return "";
  }

  template <typename T>
  FieldBuilder<C, T> add(const std::string& key, std::function<T(const C&)> get, const std::string& doc,
                         std::function<void(ConfigTable&, C&)> read) {
    Field<C>& f = fields_.emplace_back();
    f.key = key;
    f.doc = doc;
    f.type = field_detail::base_type_name<T>();
    f.read = std::move(read);
    f.literal = [get](const C& c) { return toml_literal(get(c)); };
    f.default_text = f.literal(C{});
    return FieldBuilder<C, T>(f, std::move(get));
  }

  void read_nested(ConfigTable& table, const Field<C>& f, C& config) const {
    ConfigTable sub = table.table(f.key);
    if (f.nested->before) f.nested->before(table, config);
    f.nested->read(sub, config);
    if (f.nested->after) f.nested->after(sub, config);
  }

  std::string name_;
  std::string doc_;
  std::map<std::string, std::string> hints_;
  std::vector<Section> sections_;
  std::deque<Field<C>> fields_;  // a deque: builders keep references to their entry
  std::vector<Rules> rules_;
};

}  // namespace zest
