// Horizon: the recipe's YAML engine: a strict reader (every key a field of the table, typed, in range,
// errors with file:line and key path, command-line overrides), the writer of a resolved recipe, the
// schema, the architecture comparison and the model an init_from directory fills. The fields are
// train/recipe_fields.h's (and attention/spec_fields.h's for each layer kind); the recipe's meaning
// (its checks, its model and evaluation) is train/recipe.cpp's.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

#include "attention/spec_fields.h"
#include "core/fields.h"
#include "train/recipe.h"
#include "train/recipe_fields.h"

namespace hz::train {

namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::stringstream ss(path);
  std::string part;
  std::vector<std::string> parts;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  return parts;
}

std::string fmt_line(const std::string& file, const YAML::Mark& m) {
  if (m.line < 0) return file + " (command-line override)";
  return file + ":" + std::to_string(m.line + 1);
}

// ---- reader ---------------------------------------------------------------------------------
struct Reader {
  YAML::Node root;
  std::string file;
  std::set<std::string> known;            // visited leaf paths
  std::set<std::string> dynamic_prefixes;  // subtrees owned by a map-typed field
  std::set<std::string> overridden;        // paths set on the command line
  // the JSON files number lists name: read a step above (read_recipe_files) and handed in, or
  // collected (named_files) instead of read
  const RecipeFiles* files = nullptr;
  std::vector<NamedFile>* collect = nullptr;

  // The node at a dotted path (Undefined when absent). A section on the way that is neither a map
  // nor empty (`train: -5`, `optim: [1, 2]`) is refused, not skipped.
  YAML::Node find(const std::string& path) const {
    YAML::Node cur;
    cur.reset(root);
    std::string at;
    for (const std::string& part : split_path(path)) {
      if (cur.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
      if (!cur.IsMap())
        fail(cur, at, std::string("expected a section (a map of fields), got a ") + (cur.IsSequence() ? "list" : "scalar '" + cur.Scalar() + "'"));
      YAML::Node next = cur[part];
      if (!next.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
      cur.reset(next);
      at += (at.empty() ? "" : ".") + part;
    }
    return cur;
  }
  bool from_command_line(const std::string& path) const {
    for (const auto& o : overridden)
      if (path == o || path.rfind(o + ".", 0) == 0 || path.rfind(o + "[", 0) == 0) return true;
    return false;
  }
  std::string where(const YAML::Node& n, const std::string& path) const {
    return from_command_line(path) ? file + " (command-line override " + path + ")" : fmt_line(file, n.Mark());
  }
  [[noreturn]] void fail(const YAML::Node& n, const std::string& path, const std::string& what) const {
    throw RecipeError(where(n, path) + ": " + path + ": " + what);
  }
  template <class T>
  T convert(const YAML::Node& n, const std::string& path, const char* tname) const {
    if (!n.IsScalar()) fail(n, path, std::string("expected ") + tname + ", got a " + (n.IsMap() ? "map" : n.IsSequence() ? "list" : "null"));
    try {
      return n.as<T>();
    } catch (const YAML::Exception&) {
      fail(n, path, std::string("expected ") + tname + ", got '" + n.Scalar() + "'");
    }
  }
  template <class T>
  T in_range(const YAML::Node& n, const std::string& path, T x, const Field& f) const {
    if (!f.contains(static_cast<double>(x)))
      fail(n, path, "must be " + (f.bounded() ? f.range() : std::string("finite")) + ", got " + n.Scalar() +
                        " (horizon train --schema lists each field's range)");
    if constexpr (std::is_integral_v<T>)
      if (f.hi == HUGE_VAL && static_cast<double>(x) > kIntCeiling)
        fail(n, path, "must be at most 2^40 = 1099511627776 (no integer field takes more), got " + n.Scalar());
    return x;
  }
  void operator()(const std::string& path, int64_t& v, const Field& f) {
    known.insert(path);
    YAML::Node n = find(path);
    if (n.IsDefined()) v = in_range(n, path, convert<int64_t>(n, path, "an integer"), f);
  }
  void operator()(const std::string& path, double& v, const Field& f) {
    known.insert(path);
    YAML::Node n = find(path);
    if (n.IsDefined()) v = in_range(n, path, convert<double>(n, path, "a number"), f);
  }
  void operator()(const std::string& path, bool& v, const Field&) {
    known.insert(path);
    YAML::Node n = find(path);
    if (n.IsDefined()) v = convert<bool>(n, path, "true or false");
  }
  void operator()(const std::string& path, std::string& v, const Field&) {
    known.insert(path);
    YAML::Node n = find(path);
    if (n.IsDefined()) v = n.IsNull() ? std::string() : convert<std::string>(n, path, "a string");
  }
  template <class T>
  void list(const std::string& path, std::vector<T>& v, const char* tname, const Field* f = nullptr) {
    known.insert(path);
    YAML::Node n = find(path);
    if (!n.IsDefined() || n.IsNull()) return;
    if (!n.IsSequence()) fail(n, path, std::string("expected a list of ") + tname);
    v.clear();
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string at = path + "[" + std::to_string(i) + "]";
      T x = convert<T>(n[i], at, tname);
      if constexpr (std::is_arithmetic_v<T>)
        if (f) x = in_range(n[i], at, x, *f);
      v.push_back(x);
    }
  }
  void operator()(const std::string& path, std::vector<int64_t>& v, const Field& f) { list(path, v, "integers", &f); }
  void operator()(const std::string& path, std::vector<double>& v, const Field& f) {
    const YAML::Node n = find(path);
    if (n.IsDefined() && n.IsScalar()) {  // a vector of numbers from a JSON file (factors_from_json)
      known.insert(path);
      const std::string name = convert<std::string>(n, path, "a list of numbers or a JSON file");
      if (collect) {  // relative to the working directory, else to the recipe's directory
        const bool beside = std::filesystem::path(name).is_relative() && !from_command_line(path);
        collect->push_back({path, name, beside ? (std::filesystem::path(file).parent_path() / name).string() : ""});
        return;
      }
      if (files && files->errors.count(path)) fail(n, path, files->errors.at(path));
      if (!files || !files->lists.count(path))
        fail(n, path, "names the file '" + name + "', which was not read (parse_recipe reads nothing: load_recipe reads "
                      "a recipe's files)");
      v = files->lists.at(path);
      for (size_t i = 0; i < v.size(); ++i) v[i] = in_range(n, path + "[" + std::to_string(i) + "]", v[i], f);
      return;
    }
    list(path, v, "numbers", &f);
  }
  void operator()(const std::string& path, std::vector<std::string>& v, const Field&) { list(path, v, "strings"); }
  void operator()(const std::string& path, std::map<int64_t, std::string>& v, const Field&) {
    known.insert(path);
    dynamic_prefixes.insert(path);
    YAML::Node n = find(path);
    if (!n.IsDefined() || n.IsNull()) return;
    if (!n.IsMap()) fail(n, path, "expected a map {layer index: kind name}");
    v.clear();
    for (auto it = n.begin(); it != n.end(); ++it)
      v[convert<int64_t>(it->first, path, "a layer index")] = convert<std::string>(it->second, path, "a kind name");
  }
  template <class E>
  void enumeration(const std::string& path, E& v, const Field&, E (*parse)(const std::string&), const char* (*)(E)) {
    known.insert(path);
    YAML::Node n = find(path);
    if (!n.IsDefined()) return;
    const std::string s = convert<std::string>(n, path, "a name");
    try {
      v = parse(s);
    } catch (const ValueError& e) {
      fail(n, path, e.what());
    }
  }
  // an optional choice: '' (or null) leaves it unset
  template <class E>
  void enumeration(const std::string& path, std::optional<E>& v, const Field&, E (*parse)(const std::string&),
                   const char* (*)(E)) {
    known.insert(path);
    YAML::Node n = find(path);
    if (!n.IsDefined()) return;
    const std::string s = n.IsNull() ? std::string() : convert<std::string>(n, path, "a name or ''");
    if (s.empty()) {
      v.reset();
      return;
    }
    try {
      v = parse(s);
    } catch (const ValueError& e) {
      fail(n, path, e.what());
    }
  }
  void kinds(const std::string& path, std::vector<nn::LayerKind>& kinds, const Field&) {
    known.insert(path);
    YAML::Node n = find(path);
    if (!n.IsDefined() || n.IsNull()) return;
    if (!n.IsMap()) fail(n, path, "expected a map {kind name: {pos: ..., mask: ..., ...}}");
    kinds.clear();
    for (auto it = n.begin(); it != n.end(); ++it) {
      nn::LayerKind k;
      k.name = convert<std::string>(it->first, path, "a kind name");
      // the name becomes a path component (model.layer_kinds.NAME.field): no dots or other punctuation
      const bool ident = !k.name.empty() && std::all_of(k.name.begin(), k.name.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
      });
      if (!ident)
        fail(it->first, path, "kind name '" + k.name + "': use letters, digits, '_' and '-' only");
      if (!it->second.IsMap() && !it->second.IsNull()) fail(it->second, path + "." + k.name, "expected a map of attention fields");
      attn::visit_spec_fields(path + "." + k.name, k.attn, *this);
      kinds.push_back(k);
    }
  }
  // Every key in the document must be a known field.
  void check_unknown(const YAML::Node& n, const std::string& prefix) const {
    if (!n.IsMap()) return;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string key = it->first.as<std::string>();
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      if (known.count(path)) {
        if (!dynamic_prefixes.count(path)) check_unknown(it->second, path);
        continue;
      }
      bool is_prefix = false;
      for (const auto& k : known) is_prefix |= k.rfind(path + ".", 0) == 0;
      if (!is_prefix) {
        std::string hint;
        for (const auto& k : known)
          if (k.rfind(prefix.empty() ? "" : prefix + ".", 0) == 0 && k.find('.', prefix.size() + 1) == std::string::npos)
            hint += (hint.empty() ? "" : ", ") + k.substr(prefix.empty() ? 0 : prefix.size() + 1);
        throw RecipeError(where(it->first, path) + ": unknown key '" + path + "'" +
                          (hint.empty() ? "" : "; known keys here: " + hint));
      }
      check_unknown(it->second, path);
    }
  }
};

// ---- writer ---------------------------------------------------------------------------------
struct Writer {
  YAML::Node root;
  YAML::Node at(const std::string& path) {
    const std::vector<std::string> parts = split_path(path);
    YAML::Node cur;
    cur.reset(root);
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      YAML::Node next = cur[parts[i]];
      cur.reset(next);
    }
    YAML::Node leaf = cur[parts.back()];
    return leaf;
  }
  template <class T>
  void operator()(const std::string& path, T& v, const Field&) {
    YAML::Node n = at(path);
    n = v;
  }
  void operator()(const std::string& path, std::vector<int64_t>& v, const Field&) { seq(path, v); }
  void operator()(const std::string& path, std::vector<double>& v, const Field&) { seq(path, v); }
  void operator()(const std::string& path, std::vector<std::string>& v, const Field&) { seq(path, v); }
  template <class T>
  void seq(const std::string& path, const std::vector<T>& v) {
    YAML::Node n = at(path);
    n = YAML::Node(YAML::NodeType::Sequence);
    for (const auto& x : v) n.push_back(x);
    n.SetStyle(YAML::EmitterStyle::Flow);
  }
  void operator()(const std::string& path, std::map<int64_t, std::string>& v, const Field&) {
    YAML::Node n = at(path);
    n = YAML::Node(YAML::NodeType::Map);
    for (const auto& [k, s] : v) n[std::to_string(k)] = s;
    n.SetStyle(YAML::EmitterStyle::Flow);
  }
  template <class E>
  void enumeration(const std::string& path, E& v, const Field&, E (*)(const std::string&), const char* (*name)(E)) {
    YAML::Node n = at(path);
    n = std::string(name(v));
  }
  template <class E>
  void enumeration(const std::string& path, std::optional<E>& v, const Field&, E (*)(const std::string&),
                   const char* (*name)(E)) {
    YAML::Node n = at(path);
    n = v ? std::string(name(*v)) : std::string();
  }
  void kinds(const std::string& path, std::vector<nn::LayerKind>& kinds, const Field&) {
    for (auto& k : kinds) attn::visit_spec_fields(path + "." + k.name, k.attn, *this);
  }
};

// ---- schema -----------------------------------------------------------------------------------
struct Doc {
  std::ostringstream os;
  template <class T>
  static std::string show(const T& v) {
    std::ostringstream s;
    s << v;
    return s.str();
  }
  void line(const std::string& path, const std::string& type, const std::string& def, const Field& f) {
    const std::string range = f.range();
    os << "  " << path << " (" << type << ", default " << (def.empty() ? "''" : def) << (range.empty() ? "" : ", " + range)
       << "; " << role_name(f.role) << ")\n      " << f.doc << "\n";
  }
  void operator()(const std::string& p, int64_t& v, const Field& f) { line(p, "int", show(v), f); }
  void operator()(const std::string& p, double& v, const Field& f) { line(p, "number", show(v), f); }
  void operator()(const std::string& p, bool& v, const Field& f) { line(p, "bool", v ? "true" : "false", f); }
  void operator()(const std::string& p, std::string& v, const Field& f) { line(p, "string", v, f); }
  template <class T>
  void operator()(const std::string& p, std::vector<T>& v, const Field& f) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + show(v[i]);
    line(p, "list", s + "]", f);
  }
  void operator()(const std::string& p, std::map<int64_t, std::string>&, const Field& f) { line(p, "map", "{}", f); }
  template <class E>
  void enumeration(const std::string& p, E& v, const Field& f, E (*)(const std::string&), const char* (*name)(E)) {
    line(p, "name", name(v), f);
  }
  template <class E>
  void enumeration(const std::string& p, std::optional<E>& v, const Field& f, E (*)(const std::string&),
                   const char* (*name)(E)) {
    line(p, "name", v ? name(*v) : "", f);
  }
  void kinds(const std::string& p, std::vector<nn::LayerKind>&, const Field& f) {
    os << "  " << p << " (map, default {default: rope causal identity}; " << role_name(f.role) << ")\n      " << f.doc << "\n";
    attn::AttentionSpec s;
    attn::visit_spec_fields(p + ".<kind>", s, *this);
  }
};

// Every key of every map of the document (sections, layer kinds and flow maps alike) must be a
// name, and appear once: a list or map used as a key (`{lengths, [256, 512]}` makes [256, 512] a
// key) is refused with its line, and so is a repeated key, naming the lines of both (yaml-cpp
// keeps both entries and lookups find the first).
void check_keys(const YAML::Node& n, const std::string& prefix, const std::string& file) {
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) check_keys(n[i], prefix + "[" + std::to_string(i) + "]", file);
    return;
  }
  if (!n.IsMap()) return;
  std::map<std::string, YAML::Mark> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar())
      throw RecipeError(fmt_line(file, it->first.Mark()) + ": a key in '" + (prefix.empty() ? std::string("(top level)") : prefix) +
                        "' is a " + (it->first.IsSequence() ? "list" : it->first.IsMap() ? "map" : "null") +
                        ", not a name (a missing ':' after the key before it?)");
    const std::string key = it->first.Scalar();
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    const auto [first, fresh] = seen.emplace(key, it->first.Mark());
    if (!fresh)
      throw RecipeError(fmt_line(file, it->first.Mark()) + ": duplicate key '" + path + "' (first at " +
                        fmt_line(file, first->second) + "); a key may appear once per section");
    check_keys(it->second, path, file);
  }
}

// ---- field values by path (architecture comparison) -------------------------------------------
struct Flatten {
  std::map<std::string, std::pair<Role, std::string>> fields;
  void put(const std::string& p, const Field& f, const std::string& v) { fields[p] = {f.role, v}; }
  template <class T>
  void operator()(const std::string& p, T& v, const Field& f) {
    put(p, f, Doc::show(v));
  }
  void operator()(const std::string& p, bool& v, const Field& f) { put(p, f, v ? "true" : "false"); }
  void operator()(const std::string& p, std::string& v, const Field& f) { put(p, f, "'" + v + "'"); }
  template <class T>
  void operator()(const std::string& p, std::vector<T>& v, const Field& f) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + Doc::show(v[i]);
    put(p, f, s + "]");
  }
  void operator()(const std::string& p, std::map<int64_t, std::string>& v, const Field& f) {
    std::string s = "{";
    for (const auto& [k, n] : v) s += (s.size() > 1 ? ", " : "") + std::to_string(k) + ": " + n;
    put(p, f, s + "}");
  }
  template <class E>
  void enumeration(const std::string& p, E& v, const Field& f, E (*)(const std::string&), const char* (*name)(E)) {
    put(p, f, name(v));
  }
  template <class E>
  void enumeration(const std::string& p, std::optional<E>& v, const Field& f, E (*)(const std::string&),
                   const char* (*name)(E)) {
    put(p, f, v ? name(*v) : "''");
  }
  void kinds(const std::string& p, std::vector<nn::LayerKind>& kinds, const Field& f) {
    std::string names;
    for (auto& k : kinds) names += (names.empty() ? "" : ", ") + k.name;
    put(p, f, "{" + names + "}");
    for (auto& k : kinds) attn::visit_spec_fields(p + "." + k.name, k.attn, *this);
  }
};

std::string apply_override(YAML::Node& root, const std::string& ov) {
  const size_t eq = ov.find('=');
  if (eq == std::string::npos || eq == 0)
    throw RecipeError("override '" + ov + "' must look like key.path=value (e.g. train.steps=100)");
  const std::string path = ov.substr(0, eq), value = ov.substr(eq + 1);
  const std::vector<std::string> parts = split_path(path);
  YAML::Node cur;
  cur.reset(root);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = cur[parts[i]];
    if (next.IsDefined() && !next.IsMap() && !next.IsNull())
      throw RecipeError("override '" + ov + "': '" + parts[i] + "' is not a section");
    cur.reset(next);
  }
  YAML::Node v;
  try {
    v = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw RecipeError("override '" + ov + "': value is not valid YAML: " + e.what());
  }
  cur[parts.back()] = v;
  return path;
}

// The model fields a recipe (after its overrides) leaves out.
std::vector<std::string> missing_model_fields(const YAML::Node& root) {
  auto is_map = [](const YAML::Node& n) { return n.IsDefined() && n.IsMap(); };  // (a missing key is invalid)
  const YAML::Node model = root["model"];
  Recipe defaults;
  Writer all;
  all.root = YAML::Node(YAML::NodeType::Map);
  visit_fields(defaults, all);
  std::vector<std::string> missing;
  for (auto it = all.root["model"].begin(); it != all.root["model"].end(); ++it) {
    const std::string key = it->first.as<std::string>();
    if (!is_map(model) || !model[key]) missing.push_back(key);
  }
  return missing;
}

// checkpoint.init_from when it names a directory to fill the model from: set, and some model field
// left out (a recipe whose model section is complete, such as a run's config.yaml, never needs it).
std::string fill_dir_of(const YAML::Node& root) {
  auto is_map = [](const YAML::Node& n) { return n.IsDefined() && n.IsMap(); };
  const YAML::Node ck = root["checkpoint"];
  if (!is_map(ck) || !ck["init_from"] || !ck["init_from"].IsScalar()) return "";
  const YAML::Node model = root["model"];
  if (model.IsDefined() && !model.IsNull() && !model.IsMap()) return "";  // the parser reports it
  return missing_model_fields(root).empty() ? "" : ck["init_from"].Scalar();
}

// Every model field the recipe leaves out from fill.model, and data.tokenizer when it gives none.
void fill_model(YAML::Node& root, const ModelFill& fill) {
  const std::vector<std::string> missing = missing_model_fields(root);
  if (missing.empty()) return;
  Recipe imported;
  imported.model.cfg = fill.model;
  Writer w;
  w.root = YAML::Node(YAML::NodeType::Map);
  visit_fields(imported, w);
  const YAML::Node model = root["model"];
  if (!(model.IsDefined() && model.IsMap())) root["model"] = YAML::Node(YAML::NodeType::Map);
  YAML::Node m = root["model"];
  for (const auto& key : missing) m[key] = w.root["model"][key];
  const YAML::Node data = root["data"];
  if (!(data.IsDefined() && data.IsMap() && data["tokenizer"])) root["data"]["tokenizer"] = fill.tokenizer;
}

}  // namespace

YAML::Node load_yaml_document(const std::string& text, const std::string& file) {
  // A second document: content after a marker line ('---' or '...' at column 0, which ends a
  // document wherever it stands) that follows content. Found by lines rather than YAML::LoadAll,
  // which in yaml-cpp 0.7 never returns on some inputs (a plain scalar starting with ',' allocates
  // nodes until the memory runs out: found by the fuzzer).
  std::istringstream in(text);
  std::string line;
  int64_t n = 0;
  bool content = false, ended = false;  // content seen; a marker line after it
  int64_t first = 0;                    // the first line with content
  while (std::getline(in, line)) {
    ++n;
    const bool marker = (line.rfind("---", 0) == 0 || line.rfind("...", 0) == 0) &&
                        (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
    const size_t at = line.find_first_not_of(" \t\r", marker ? 3 : 0);
    const bool has_content = at != std::string::npos && line[at] != '#';
    if (marker) ended |= content;
    if (has_content && ended)
      throw RecipeError(file + ":" + std::to_string(n) +
                        ": a second YAML document (after '---' or '...'); a recipe is one document: remove it or "
                        "merge its fields into the first");
    if (has_content && !content) first = n;
    content |= has_content;
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw RecipeError(file + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
  }
  // yaml-cpp gives an empty document for text it stops reading at once (a line starting with ',', '%',
  // an anchor or a tag alone): refuse rather than read the defaults
  if (root.IsNull() && content)
    throw RecipeError(file + ":" + std::to_string(first) +
                      ": YAML syntax error: the text does not read as a YAML document (does a line start with ',', "
                      "'%', '&' or '!'?)");
  return root;
}

namespace {

// The recipe's YAML with its overrides applied, its keys checked.
Reader read_root(const std::string& text, const std::string& file, const std::vector<std::string>& overrides) {
  Reader rd;
  rd.file = file;
  rd.root = load_yaml_document(text, file);
  if (rd.root.IsNull()) rd.root = YAML::Node(YAML::NodeType::Map);
  if (!rd.root.IsMap()) throw RecipeError(file + ": a recipe must be a map of sections (run, model, data, ...)");
  check_keys(rd.root, "", file);
  for (const auto& ov : overrides) rd.overridden.insert(apply_override(rd.root, ov));
  return rd;
}

// Settings that parse and would train, but not what they say, refused with the key's file and line
// (or its command-line override) like any field error: a prefix-LM prefix as long as the sequence
// leaves each sequence one target or none (the loss skips the targets a prefix shows its queries), and
// train.position_max is read by drawn positions only (with index positions it would change nothing).
void check_settings(const Recipe& r, const Reader& rd) {
  const int64_t T = r.data.seq_len;
  for (const auto& k : r.model.cfg.kinds)
    if (k.attn.mask.prefix >= T) {
      const std::string path = "model.layer_kinds." + k.name + ".prefix";
      rd.fail(rd.find(path), path,
              std::to_string(k.attn.mask.prefix) + " is at least data.seq_len = " + std::to_string(T) +
                  ": a prefix-LM leaves the targets after its prefix to the loss, so each sequence would train " +
                  (k.attn.mask.prefix == T ? "one target" : "no target") + "; set it below data.seq_len");
    }
  if (r.train.positions.scheme == data::PositionScheme::Index && r.train.positions.max != 0)
    rd.fail(rd.find("train.position_max"), "train.position_max",
            std::to_string(r.train.positions.max) +
                " is read by drawn positions only (train.positions pose, randomized or continuous); with index "
                "positions it changes nothing: remove it, or set train.positions");
}

}  // namespace

namespace {
Recipe parse(const std::string& text, const std::string& file, const std::vector<std::string>& overrides,
             const ModelFill* fill, const RecipeFiles* files, bool trained) {
  Reader rd = read_root(text, file, overrides);
  rd.files = files;
  if (fill) fill_model(rd.root, *fill);
  Recipe r;
  r.source_file = file;
  visit_fields(r, rd);
  rd.check_unknown(rd.root, "");
  if (!trained) check_settings(r, rd);
  r.validate();
  return r;
}
}  // namespace

Recipe parse_recipe(const std::string& text, const std::string& file, const std::vector<std::string>& overrides,
                    const ModelFill* fill, const RecipeFiles* files) {
  return parse(text, file, overrides, fill, files, /*trained=*/false);
}

Recipe parse_trained_recipe(const std::string& text, const std::string& file, const std::vector<std::string>& overrides,
                            const RecipeFiles* files) {
  return parse(text, file, overrides, nullptr, files, /*trained=*/true);
}

std::string model_fill_dir(const std::string& text, const std::string& file, const std::vector<std::string>& overrides) {
  return fill_dir_of(read_root(text, file, overrides).root);
}

std::vector<NamedFile> named_files(const std::string& text, const std::string& file,
                                   const std::vector<std::string>& overrides) {
  Reader rd = read_root(text, file, overrides);
  std::vector<NamedFile> out;
  rd.collect = &out;
  Recipe r;
  visit_fields(r, rd);
  return out;
}

std::string to_yaml(const Recipe& r_in) {
  Recipe r = r_in;
  Writer w;
  w.root = YAML::Node(YAML::NodeType::Map);
  visit_fields(r, w);
  YAML::Emitter e;
  e << w.root;
  return std::string("# resolved Horizon recipe: every field, defaults included\n") + e.c_str() + "\n";
}

std::string recipe_schema() {
  Recipe r;
  Doc d;
  visit_fields(r, d);
  return "Recipe fields (YAML sections; command-line overrides key.path=value take precedence):\n" + d.os.str();
}

std::vector<std::string> architecture_changes(const Recipe& trained, const Recipe& now) {
  Recipe a = trained, b = now;
  Flatten fa, fb;
  visit_fields(a, fa);
  visit_fields(b, fb);
  std::vector<std::string> out;
  const std::string absent = "(absent)";
  auto value = [&](const Flatten& f, const std::string& p) {
    const auto it = f.fields.find(p);
    return it == f.fields.end() ? absent : it->second.second;
  };
  std::set<std::string> paths;
  for (const auto& [p, rv] : fa.fields)
    if (rv.first == Role::Architecture) paths.insert(p);
  for (const auto& [p, rv] : fb.fields)
    if (rv.first == Role::Architecture) paths.insert(p);
  for (const auto& p : paths)
    if (value(fa, p) != value(fb, p)) out.push_back(p + ": " + value(fa, p) + " -> " + value(fb, p));
  return out;
}

}  // namespace hz::train
