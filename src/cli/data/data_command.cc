#include "cli/data/data_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "store/import.h"
#include "store/npy.h"
#include "store/snapshot.h"
#include "store/store.h"
#include "store/transaction.h"

namespace cohort::cli {

using nlohmann::json;
using store::HostArray;

namespace {

// Parses "1,2,3" / whitespace-separated ids; `what` names the source for errors.
Result<std::vector<uint64_t>> ParseIdList(const std::string& text, const std::string& what) {
  std::vector<uint64_t> ids;
  std::string token;
  size_t line = 1;
  auto flush = [&]() -> Status {
    if (token.empty()) return Status::OK();
    uint64_t v = 0;
    for (char c : token) {
      if (c < '0' || c > '9' || v > (UINT64_MAX - 9) / 10) {
        return Status::InvalidArgument(what + ":" + std::to_string(line) + ": '" + token +
                                       "' is not a sample id");
      }
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    ids.push_back(v);
    token.clear();
    return Status::OK();
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      COHORT_RETURN_IF_ERROR(flush());
      if (c == '\n') line++;
    } else {
      token.push_back(c);
    }
  }
  COHORT_RETURN_IF_ERROR(flush());
  return ids;
}

// Ids from a .npy (integer, 1-D) or a text file of ids.
Result<std::vector<uint64_t>> ReadIdsFile(const std::string& path) {
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".npy") == 0) {
    COHORT_ASSIGN_OR_RETURN(HostArray a, store::ReadNpyFile(path));
    if (a.shape.size() != 1) {
      return Status::InvalidArgument(path + ": ids must be a 1-D array, got shape " +
                                     store::ShapeToString(a.shape));
    }
    std::vector<uint64_t> ids(a.rows());
    for (uint64_t i = 0; i < a.rows(); i++) {
      switch (a.dtype) {
        case store::Dtype::kUint64:
          ids[i] = a.as<uint64_t>()[i];
          break;
        case store::Dtype::kInt64:
        case store::Dtype::kInt32: {
          int64_t v = a.dtype == store::Dtype::kInt64 ? a.as<int64_t>()[i] : a.as<int32_t>()[i];
          if (v < 0) {
            return Status::InvalidArgument(path + ": entry " + std::to_string(i) +
                                           " is negative (" + std::to_string(v) + ")");
          }
          ids[i] = static_cast<uint64_t>(v);
          break;
        }
        default:
          return Status::InvalidArgument(path + ": ids must be integers, not " +
                                         store::DtypeName(a.dtype));
      }
    }
    return ids;
  }
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot open ids file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseIdList(ss.str(), path);
}

std::string LabelsText(const store::TableSchema& s) {
  if (s.label_kind == store::LabelKind::kVector)
    return "vector" + store::DimsToString(s.label_shape);
  return store::LabelKindName(s.label_kind);
}

uint64_t TableBytes(const store::TableEntry& t) {
  uint64_t bytes = t.rows_file.bytes;
  for (const auto& s : t.segments) bytes += s.x.bytes + (s.y ? s.y->bytes : 0) + s.ids.bytes;
  return bytes;
}

uint64_t SegmentRows(const store::TableEntry& t) {
  uint64_t rows = 0;
  for (const auto& s : t.segments) rows += s.rows;
  return rows;
}

std::string HumanBytes(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(b) / (1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1ull << 10));
  return fmt::format("{} B", b);
}

json ManifestSummaryJson(const store::Manifest& m) {
  json j;
  j["generation"] = m.generation;
  j["parent"] = m.parent ? json(*m.parent) : json(nullptr);
  j["created"] = m.created;
  j["note"] = m.note;
  if (m.origin) j["origin"] = {{"store", m.origin->store}, {"generation", m.origin->generation}};
  json tables = json::object();
  for (const auto& [name, t] : m.tables) {
    json jt = store::SchemaToJson(t.schema);
    jt["rows"] = t.row_count;
    jt["segments"] = t.segments.size();
    jt["dead_rows"] = SegmentRows(t) - t.row_count;
    jt["bytes"] = TableBytes(t);
    tables[name] = jt;
  }
  j["tables"] = tables;
  return j;
}

// ---- commands ----------------------------------------------------------------------------

// Begins the store's one write, showing what Begin repaired (an interrupted commit's
// manifest it removed) as warnings: a generation is never removed without a word.
Result<std::unique_ptr<store::Transaction>> BeginWriting(const std::string& dir) {
  COHORT_ASSIGN_OR_RETURN(auto txn, store::Transaction::Begin(dir));
  for (const auto& note : txn->notes()) fmt::print(stderr, "cohort: warning: {}\n", note);
  return txn;
}

struct ImportArgs {
  std::string store;
  std::string table;
  std::vector<std::string> idx;
  std::vector<std::string> npy;
  std::string csv;
  std::string label_column;
  std::string label_type = "auto";
  int64_t classes = 0;
  bool allow_non_finite = false;
  uint64_t limit = 0;
  std::string note;
};

// NaN or infinite features (or regression targets) are refused unless asked for: a member
// trained on them learns NaN.
Status CheckFiniteUnlessAllowed(const ImportArgs& a, const HostArray& values,
                                const std::string& what, const char* role) {
  if (a.allow_non_finite) return Status::OK();
  Status st = store::CheckFinite(values, what, role);
  if (st.ok()) return st;
  return Status::InvalidArgument(st.message() + " (--allow-non-finite accepts NaN and infinities)");
}

// `--label-type auto` follows an existing table's kind, so integral float labels go into a
// class table as classes (and are checked as classes) instead of failing on the schema.
std::string EffectiveLabelType(const ImportArgs& a, const store::Transaction& txn) {
  if (a.label_type != "auto" || !txn.HasTable(a.table)) return a.label_type;
  auto schema = txn.Schema(a.table);
  if (!schema.ok()) return a.label_type;
  if (schema->label_kind == store::LabelKind::kClass) return "class";
  if (schema->label_kind == store::LabelKind::kVector) return "vector";
  return a.label_type;
}

// What an import read: features, labels (when the files hold any) and the file it names.
struct ImportedArrays {
  HostArray x;
  HostArray y;
  bool has_labels = true;
  std::string source;
};

Result<ImportedArrays> ReadNpySource(const ImportArgs& a, const std::string& label_type) {
  ImportedArrays in;
  COHORT_ASSIGN_OR_RETURN(HostArray raw_x, store::ReadNpyFile(a.npy[0]));
  COHORT_ASSIGN_OR_RETURN(in.x, store::ToStoreFeatures(std::move(raw_x), a.npy[0]));
  COHORT_RETURN_IF_ERROR(CheckFiniteUnlessAllowed(a, in.x, a.npy[0], "features"));
  in.source = a.npy[0];
  if (a.npy.size() != 2) {
    in.has_labels = false;
    return in;
  }
  COHORT_ASSIGN_OR_RETURN(HostArray raw_y, store::ReadNpyFile(a.npy[1]));
  bool integral = raw_y.dtype != store::Dtype::kFloat32 && raw_y.dtype != store::Dtype::kFloat64;
  bool as_class = label_type == "class" || (label_type == "auto" && integral);
  if (as_class) {
    COHORT_ASSIGN_OR_RETURN(in.y, store::ToClassLabels(std::move(raw_y), a.npy[1]));
    COHORT_RETURN_IF_ERROR(store::CheckClassLabels(in.y, a.classes, a.npy[1]));
  } else {
    COHORT_ASSIGN_OR_RETURN(in.y, store::ToVectorLabels(std::move(raw_y), a.npy[1]));
    COHORT_RETURN_IF_ERROR(CheckFiniteUnlessAllowed(a, in.y, a.npy[1], "labels"));
  }
  if (in.y.rows() != in.x.rows()) {
    return Status::InvalidArgument(fmt::format("{} has {} samples but {} has {}", a.npy[0],
                                               in.x.rows(), a.npy[1], in.y.rows()));
  }
  return in;
}

Result<ImportedArrays> ReadImportSource(const ImportArgs& a, const std::string& label_type) {
  ImportedArrays in;
  if (!a.idx.empty()) {
    COHORT_ASSIGN_OR_RETURN(auto pair, store::ReadIdxDataset(a.idx[0], a.idx[1], a.classes));
    in.x = std::move(pair.first);
    in.y = std::move(pair.second);
    in.source = a.idx[0];
    COHORT_RETURN_IF_ERROR(CheckFiniteUnlessAllowed(a, in.x, a.idx[0], "features"));
    return in;
  }
  if (!a.npy.empty()) return ReadNpySource(a, label_type);
  if (a.label_column.empty()) {
    return Status::InvalidArgument("--csv needs --label-column NAME");
  }
  store::CsvOptions opts;
  opts.label_column = a.label_column;
  if (label_type == "class") opts.label_type = store::CsvOptions::LabelType::kClass;
  if (label_type == "vector") opts.label_type = store::CsvOptions::LabelType::kVector;
  opts.classes = a.classes;
  opts.allow_non_finite = a.allow_non_finite;
  COHORT_ASSIGN_OR_RETURN(auto pair, store::ReadCsvDataset(a.csv, opts));
  in.x = std::move(pair.first);
  in.y = std::move(pair.second);
  in.source = a.csv;
  return in;
}

store::TableSchema SchemaOf(const ImportedArrays& in) {
  store::TableSchema schema;
  schema.feature_dtype = in.x.dtype;
  schema.feature_shape = in.x.row_shape();
  if (!in.has_labels) {
    schema.label_kind = store::LabelKind::kNone;
  } else if (in.y.dtype == store::Dtype::kInt64) {
    schema.label_kind = store::LabelKind::kClass;
  } else {
    schema.label_kind = store::LabelKind::kVector;
    schema.label_shape = in.y.row_shape();
  }
  return schema;
}

Status RunImport(const ImportArgs& a) {
  int sources = !a.idx.empty() + !a.npy.empty() + !a.csv.empty();
  if (sources != 1) {
    return Status::InvalidArgument("import needs exactly one of --idx, --npy, --csv");
  }
  if (a.classes < 0 || a.classes == 1) {
    return Status::InvalidArgument(
        fmt::format("--classes {}: a class table needs at least 2 classes", a.classes));
  }
  if (a.classes > 0 && a.label_type == "vector") {
    return Status::InvalidArgument("--classes applies to class labels, not --label-type vector");
  }
  // The writer lock first: the table's kind decides how `auto` labels are read.
  COHORT_ASSIGN_OR_RETURN(auto txn, BeginWriting(a.store));
  COHORT_ASSIGN_OR_RETURN(ImportedArrays in, ReadImportSource(a, EffectiveLabelType(a, *txn)));
  if (a.classes > 0 && in.has_labels && in.y.dtype != store::Dtype::kInt64) {
    return Status::InvalidArgument(
        fmt::format("--classes {}: {} holds regression targets, not class labels", a.classes,
                    a.npy.size() == 2 ? a.npy[1] : in.source));
  }
  if (a.limit > 0) {
    in.x.TruncateRows(a.limit);
    if (in.has_labels) in.y.TruncateRows(a.limit);
  }
  const store::TableSchema schema = SchemaOf(in);
  if (!txn->HasTable(a.table)) {
    COHORT_RETURN_IF_ERROR(txn->CreateTable(a.table, schema));
  } else {
    COHORT_ASSIGN_OR_RETURN(auto have, txn->Schema(a.table));
    if (!(have == schema)) {
      return Status::InvalidArgument(fmt::format("schema mismatch: table {} has {}, {} has {}",
                                                 a.table, have.ToString(), in.source,
                                                 schema.ToString()));
    }
  }
  COHORT_ASSIGN_OR_RETURN(auto ids, txn->Append(a.table, in.x, in.has_labels ? &in.y : nullptr));
  std::string note = a.note.empty() ? fmt::format("import {} samples into {} from {}", ids.size(),
                                                  a.table, in.source)
                                    : a.note;
  COHORT_ASSIGN_OR_RETURN(uint64_t gen, txn->Commit(note));
  fmt::print("imported {} samples into table {} (ids {}..{}): generation {}\n", ids.size(), a.table,
             ids.front(), ids.back(), gen);
  return Status::OK();
}

Status RunInfo(const std::string& dir, std::optional<uint64_t> generation, bool as_json) {
  COHORT_ASSIGN_OR_RETURN(auto snap, store::Snapshot::Open(dir, generation));
  const auto& m = snap->manifest();
  if (as_json) {
    json j = ManifestSummaryJson(m);
    j["store"] = dir;
    COHORT_ASSIGN_OR_RETURN(uint64_t current, store::ReadCurrent(store::Env::Default(), dir));
    j["current"] = current;
    fmt::print("{}\n", j.dump(2, ' ', false, json::error_handler_t::replace));
    return Status::OK();
  }
  fmt::print("store       {}\n", dir);
  fmt::print("generation  {}{}\n", m.generation,
             m.parent ? fmt::format(" (parent {})", *m.parent) : std::string(" (first)"));
  fmt::print("created     {}\n", m.created);
  fmt::print("note        {}\n", m.note);
  if (m.origin)
    fmt::print("origin      {} at generation {}\n", m.origin->store, m.origin->generation);
  if (m.tables.empty()) {
    fmt::print("no tables (import data with `cohort data import`)\n");
    return Status::OK();
  }
  fmt::print("\n{:<12} {:>10} {:<20} {:<12} {:>8} {:>13} {:>10}\n", "table", "rows", "features",
             "labels", "segments", "old-gen rows", "size");
  uint64_t old_rows = 0;
  for (const auto& [name, t] : m.tables) {
    fmt::print("{:<12} {:>10} {:<20} {:<12} {:>8} {:>13} {:>10}\n", name, t.row_count,
               std::string(store::DtypeName(t.schema.feature_dtype)) +
                   store::DimsToString(t.schema.feature_shape),
               LabelsText(t.schema), t.segments.size(), SegmentRows(t) - t.row_count,
               HumanBytes(TableBytes(t)));
    old_rows += SegmentRows(t) - t.row_count;
  }
  if (old_rows > 0) {
    // Not lost data: rows moved or removed since, which older generations still hold.
    fmt::print(
        "\nold-gen rows: rows in the table's segment files that this generation no longer holds "
        "(moved to another table or removed), kept for older generations\n");
  }
  return Status::OK();
}

Status RunLog(const std::string& dir, bool as_json) {
  COHORT_ASSIGN_OR_RETURN(auto history, store::ReadHistoryEntries(dir));
  std::reverse(history.begin(), history.end());  // newest first, as git log
  // A damaged manifest is one marked generation, not a failed log: the others still show.
  size_t damaged = 0;
  if (as_json) {
    json arr = json::array();
    for (const auto& e : history) {
      if (e.manifest) {
        arr.push_back(ManifestSummaryJson(*e.manifest));
      } else {
        arr.push_back({{"generation", e.generation}, {"damaged", e.damage}});
        damaged++;
      }
    }
    fmt::print("{}\n", arr.dump(2, ' ', false, json::error_handler_t::replace));
  } else {
    for (const auto& e : history) {
      if (!e.manifest) {
        fmt::print("generation {:<5} DAMAGED: {}\n", e.generation, e.damage);
        damaged++;
        continue;
      }
      const store::Manifest& m = *e.manifest;
      std::string rows;
      for (const auto& [name, t] : m.tables) rows += fmt::format(" {}={}", name, t.row_count);
      fmt::print("generation {:<5} {}  {}\n", m.generation, m.created, m.note);
      if (!rows.empty()) fmt::print("                 rows:{}\n", rows);
    }
  }
  if (damaged > 0) {
    return Status::Corruption(
        fmt::format("{}: {} damaged manifest(s) (run `cohort data verify {}`)", dir, damaged, dir));
  }
  return Status::OK();
}

Status RunDiff(const std::string& dir, uint64_t a, uint64_t b, bool as_json, bool list_ids) {
  COHORT_ASSIGN_OR_RETURN(auto diff, store::DiffGenerations(dir, a, b));
  if (as_json) {
    json j = {{"from", a}, {"to", b}};
    json tables = json::object();
    for (const auto& [name, d] : diff) {
      tables[name] = {
          {"added", d.added}, {"removed", d.removed}, {"schema_changed", d.schema_changed}};
    }
    j["tables"] = tables;
    fmt::print("{}\n", j.dump(2, ' ', false, json::error_handler_t::replace));
    return Status::OK();
  }
  fmt::print("generation {} -> {}\n", a, b);
  for (const auto& [name, d] : diff) {
    fmt::print("{:<12} +{} -{}{}\n", name, d.added.size(), d.removed.size(),
               d.schema_changed ? " (schema changed)" : "");
    if (list_ids) {
      auto print_ids = [](const char* sign, const std::vector<uint64_t>& ids) {
        if (ids.empty()) return;
        std::string line;
        for (uint64_t id : ids) line += fmt::format(" {}", id);
        fmt::print("  {}{}\n", sign, line);
      };
      print_ids("+", d.added);
      print_ids("-", d.removed);
    }
  }
  return Status::OK();
}

struct SplitArgs {
  std::string store;
  std::string from;
  std::string to;
  uint64_t count = 0;
  double fraction = 0;
  std::string ids_file;
  uint64_t seed = 0;
  std::string note;
};

// Picks `count` of `n` positions uniformly with a seeded generator, returned ascending.
// Written out (not std::shuffle/uniform_int_distribution, whose output differs between
// standard libraries) so a seed means the same split everywhere.
std::vector<size_t> SeededSample(size_t n, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<size_t> pos(n);
  for (size_t i = 0; i < n; i++) pos[i] = i;
  for (size_t i = 0; i < count; i++) {
    uint64_t range = n - i;
    uint64_t limit = UINT64_MAX - UINT64_MAX % range;
    uint64_t r;
    do {
      r = rng();
    } while (r >= limit);
    std::swap(pos[i], pos[i + r % range]);
  }
  pos.resize(count);
  std::sort(pos.begin(), pos.end());
  return pos;
}

Status RunSplit(const SplitArgs& a) {
  if (a.fraction != 0 && !(a.fraction > 0 && a.fraction < 1)) {
    return Status::InvalidArgument(fmt::format("--fraction {}: must be in (0, 1)", a.fraction));
  }
  int modes = (a.count > 0) + (a.fraction > 0) + !a.ids_file.empty();
  if (modes != 1) {
    return Status::InvalidArgument("split needs exactly one of --count, --fraction, --ids-file");
  }
  COHORT_ASSIGN_OR_RETURN(auto txn, BeginWriting(a.store));
  COHORT_ASSIGN_OR_RETURN(auto ids, txn->TableIds(a.from));
  std::vector<uint64_t> chosen;
  if (!a.ids_file.empty()) {
    COHORT_ASSIGN_OR_RETURN(chosen, ReadIdsFile(a.ids_file));
  } else {
    uint64_t count = a.count;
    if (a.fraction > 0) {
      if (a.fraction >= 1.0) return Status::InvalidArgument("--fraction must be in (0, 1)");
      count = static_cast<uint64_t>(std::llround(a.fraction * static_cast<double>(ids.size())));
    }
    if (count > ids.size()) {
      return Status::InvalidArgument(fmt::format(
          "--count {} is more than the {} samples in table {}", count, ids.size(), a.from));
    }
    for (size_t p : SeededSample(ids.size(), count, a.seed)) chosen.push_back(ids[p]);
  }
  if (chosen.empty()) return Status::InvalidArgument("split: no samples chosen");
  COHORT_RETURN_IF_ERROR(txn->Move(a.from, a.to, chosen));
  std::string note = a.note.empty()
                         ? fmt::format("split {} samples {} -> {}{}", chosen.size(), a.from, a.to,
                                       a.ids_file.empty() ? fmt::format(" (seed {})", a.seed) : "")
                         : a.note;
  COHORT_ASSIGN_OR_RETURN(uint64_t gen, txn->Commit(note));
  fmt::print("moved {} samples from {} to {}: generation {}\n", chosen.size(), a.from, a.to, gen);
  return Status::OK();
}

Status RunRemove(const std::string& dir, const std::string& table, const std::string& ids_text,
                 const std::string& ids_file, const std::string& note) {
  if (ids_text.empty() == ids_file.empty()) {
    return Status::InvalidArgument("remove needs exactly one of --ids, --ids-file");
  }
  std::vector<uint64_t> ids;
  if (!ids_file.empty()) {
    COHORT_ASSIGN_OR_RETURN(ids, ReadIdsFile(ids_file));
  } else {
    COHORT_ASSIGN_OR_RETURN(ids, ParseIdList(ids_text, "--ids"));
  }
  if (ids.empty()) return Status::InvalidArgument("remove: no ids given");
  COHORT_ASSIGN_OR_RETURN(auto txn, BeginWriting(dir));
  COHORT_RETURN_IF_ERROR(txn->Remove(table, ids));
  COHORT_ASSIGN_OR_RETURN(
      uint64_t gen,
      txn->Commit(note.empty() ? fmt::format("remove {} samples from {}", ids.size(), table)
                               : note));
  fmt::print("removed {} samples from {}: generation {}\n", ids.size(), table, gen);
  return Status::OK();
}

Status RunVerify(const std::string& dir, std::optional<uint64_t> generation) {
  COHORT_ASSIGN_OR_RETURN(auto report, store::VerifyStore(dir, generation));
  for (const auto& w : report.warnings) fmt::print(stderr, "warning: {}\n", w);
  for (const auto& p : report.problems) fmt::print(stderr, "damaged: {}\n", p);
  if (!report.ok()) {
    return Status::Corruption(fmt::format("{}: {} problem(s) found in {} generation(s)", dir,
                                          report.problems.size(), report.generations));
  }
  fmt::print("ok: {} generation(s), {} file(s), {} checked\n", report.generations, report.files,
             HumanBytes(report.bytes));
  return Status::OK();
}

Status RunCompact(const std::string& dir, double threshold) {
  if (threshold < 0 || threshold >= 1) {
    return Status::InvalidArgument("--threshold must be in [0, 1)");
  }
  COHORT_ASSIGN_OR_RETURN(auto txn, BeginWriting(dir));
  COHORT_ASSIGN_OR_RETURN(auto tables, txn->Compact(threshold));
  if (tables.empty()) {
    fmt::print("nothing to compact (no table has more than {:.0f}% dead rows)\n", threshold * 100);
    return Status::OK();
  }
  std::string names;
  for (const auto& t : tables) names += (names.empty() ? "" : ", ") + t;
  COHORT_ASSIGN_OR_RETURN(uint64_t gen, txn->Commit("compact " + names));
  fmt::print("compacted {}: generation {}\n", names, gen);
  return Status::OK();
}

Status RunPrune(const std::string& dir, uint64_t keep) {
  COHORT_ASSIGN_OR_RETURN(auto report, store::PruneGenerations(dir, keep));
  if (report.removed_generations.empty()) {
    fmt::print("nothing to prune: the store has at most {} generation(s)\n", keep);
    return Status::OK();
  }
  fmt::print("pruned generations {}..{}: {} file(s), {} freed\n",
             report.removed_generations.front(), report.removed_generations.back(),
             report.removed_files, HumanBytes(report.freed_bytes));
  return Status::OK();
}

Status RunExport(const std::string& dir, const std::string& table, const std::string& prefix,
                 std::optional<uint64_t> generation) {
  COHORT_ASSIGN_OR_RETURN(auto snap, store::Snapshot::Open(dir, generation));
  COHORT_ASSIGN_OR_RETURN(const store::Table* t, snap->table(table));
  COHORT_RETURN_IF_ERROR(store::WriteNpyFile(prefix + ".x.npy", t->ReadFeatures()));
  std::string written = prefix + ".x.npy";
  if (t->schema().has_labels()) {
    COHORT_RETURN_IF_ERROR(store::WriteNpyFile(prefix + ".y.npy", t->ReadLabels()));
    written += ", " + prefix + ".y.npy";
  }
  std::vector<uint64_t> ids = t->Ids();
  HostArray id_array(store::Dtype::kUint64, {ids.size()});
  std::copy(ids.begin(), ids.end(), id_array.as<uint64_t>());
  COHORT_RETURN_IF_ERROR(store::WriteNpyFile(prefix + ".ids.npy", id_array));
  written += ", " + prefix + ".ids.npy";
  fmt::print("exported {} samples of {} (generation {}): {}\n", t->size(), table,
             snap->generation(), written);
  return Status::OK();
}

// Whole numbers >= 0 for unsigned options: CLI11 alone reads "-3" as 2^64 - 3.
CLI::Validator WholeNumber() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) return "";
        return "must be a whole number >= 0, not '" + text + "'";
      },
      "UINT");
}

// The data commands' options: they live as long as the App, and the chosen command's action
// reads the parsed values.
struct DataOptions {
  std::string store;
  std::string dst;
  std::string table;
  std::optional<uint64_t> generation;
  bool json = false;
  bool list_ids = false;
  uint64_t gen_a = 0;
  uint64_t gen_b = 0;
  uint64_t keep = 0;
  std::string ids;
  std::string ids_file;
  std::string out;
  std::string note;
  double threshold = 0.3;
  ImportArgs import;
  SplitArgs split;
};

void AddInitCommand(CLI::App* init, const std::shared_ptr<DataOptions>& o,
                    std::function<Status()>* run) {
  init->add_option("STORE", o->store, "Store directory")->required();
  init->callback([o, run] {
    *run = [o] {
      COHORT_RETURN_IF_ERROR(store::InitStore(o->store));
      fmt::print("initialised empty store {} (generation 0)\n", o->store);
      return Status::OK();
    };
  });
}

void AddImportCommand(CLI::App* imp, const std::shared_ptr<DataOptions>& o,
                      std::function<Status()>* run) {
  imp->add_option("STORE", o->import.store, "Store directory")->required();
  imp->add_option("--table,-t", o->import.table, "Table to append to (created if missing)")
      ->required();
  imp->add_option("--idx", o->import.idx, "MNIST-style IDX files: IMAGES LABELS (gzip or plain)")
      ->expected(2);
  imp->add_option("--npy", o->import.npy, ".npy files: FEATURES [LABELS]")->expected(1, 2);
  imp->add_option("--csv", o->import.csv, "CSV file with a header line");
  imp->add_option("--label-column", o->import.label_column, "CSV column holding the label");
  imp->add_option("--label-type", o->import.label_type,
                  "auto (integers -> classes), class, or vector (regression targets)")
      ->check(CLI::IsMember({"auto", "class", "vector"}));
  imp->add_option("--classes", o->import.classes,
                  "Class labels must be in [0, N) (default: any in [0, 100000))");
  imp->add_flag("--allow-non-finite", o->import.allow_non_finite,
                "Accept NaN and infinite features (and regression targets)");
  imp->add_option("--limit", o->import.limit, "Import only the first N samples")
      ->check(WholeNumber());
  imp->add_option("--note", o->import.note, "Note recorded with the commit");
  imp->callback([o, run] { *run = [o] { return RunImport(o->import); }; });
}

void AddInfoCommand(CLI::App* info, const std::shared_ptr<DataOptions>& o,
                    std::function<Status()>* run) {
  info->add_option("STORE", o->store, "Store directory")->required();
  info->add_option("--generation,-g", o->generation, "Generation (default: current)")
      ->check(WholeNumber());
  info->add_flag("--json", o->json, "Print JSON");
  info->callback([o, run] { *run = [o] { return RunInfo(o->store, o->generation, o->json); }; });
}

void AddLogCommand(CLI::App* log, const std::shared_ptr<DataOptions>& o,
                   std::function<Status()>* run) {
  log->add_option("STORE", o->store, "Store directory")->required();
  log->add_flag("--json", o->json, "Print JSON");
  log->callback([o, run] { *run = [o] { return RunLog(o->store, o->json); }; });
}

void AddDiffCommand(CLI::App* diff, const std::shared_ptr<DataOptions>& o,
                    std::function<Status()>* run) {
  diff->add_option("STORE", o->store, "Store directory")->required();
  diff->add_option("A", o->gen_a, "From generation")->check(WholeNumber())->required();
  diff->add_option("B", o->gen_b, "To generation")->check(WholeNumber())->required();
  diff->add_flag("--json", o->json, "Print JSON (with the ids)");
  diff->add_flag("--ids", o->list_ids, "List the ids");
  diff->callback([o, run] {
    *run = [o] { return RunDiff(o->store, o->gen_a, o->gen_b, o->json, o->list_ids); };
  });
}

void AddSplitCommand(CLI::App* split, const std::shared_ptr<DataOptions>& o,
                     std::function<Status()>* run) {
  split->add_option("STORE", o->split.store, "Store directory")->required();
  split->add_option("--from", o->split.from, "Source table")->required();
  split->add_option("--to", o->split.to, "Destination table (created if missing)")->required();
  split->add_option("--count,-n", o->split.count, "Number of samples to move")
      ->check(WholeNumber());
  split->add_option("--fraction", o->split.fraction, "Fraction of the source to move");
  split->add_option("--ids-file", o->split.ids_file, "Move these ids (.npy or text)");
  split->add_option("--seed", o->split.seed, "Random seed (default 0)")->check(WholeNumber());
  split->add_option("--note", o->split.note, "Note recorded with the commit");
  split->callback([o, run] { *run = [o] { return RunSplit(o->split); }; });
}

void AddRemoveCommand(CLI::App* remove, const std::shared_ptr<DataOptions>& o,
                      std::function<Status()>* run) {
  remove->add_option("STORE", o->store, "Store directory")->required();
  remove->add_option("--table,-t", o->table, "Table")->required();
  remove->add_option("--ids", o->ids, "Comma-separated sample ids");
  remove->add_option("--ids-file", o->ids_file, "File of ids (.npy or text)");
  remove->add_option("--note", o->note, "Note recorded with the commit");
  remove->callback([o, run] {
    *run = [o] { return RunRemove(o->store, o->table, o->ids, o->ids_file, o->note); };
  });
}

void AddVerifyCommand(CLI::App* verify, const std::shared_ptr<DataOptions>& o,
                      std::function<Status()>* run) {
  verify->add_option("STORE", o->store, "Store directory")->required();
  verify->add_option("--generation,-g", o->generation, "Only this generation (default: all)")
      ->check(WholeNumber());
  verify->callback([o, run] { *run = [o] { return RunVerify(o->store, o->generation); }; });
}

void AddCompactCommand(CLI::App* compact, const std::shared_ptr<DataOptions>& o,
                       std::function<Status()>* run) {
  compact->add_option("STORE", o->store, "Store directory")->required();
  compact->add_option("--threshold", o->threshold,
                      "Dead fraction above which a table is rewritten (default 0.3)");
  compact->callback([o, run] { *run = [o] { return RunCompact(o->store, o->threshold); }; });
}

void AddPruneCommand(CLI::App* prune, const std::shared_ptr<DataOptions>& o,
                     std::function<Status()>* run) {
  prune->add_option("STORE", o->store, "Store directory")->required();
  prune->add_option("--keep", o->keep, "Number of newest generations to keep")
      ->check(WholeNumber())
      ->required();
  prune->callback([o, run] { *run = [o] { return RunPrune(o->store, o->keep); }; });
}

void AddExportCommand(CLI::App* exp, const std::shared_ptr<DataOptions>& o,
                      std::function<Status()>* run) {
  exp->add_option("STORE", o->store, "Store directory")->required();
  exp->add_option("--table,-t", o->table, "Table")->required();
  exp->add_option("--out,-o", o->out, "Output prefix")->required();
  exp->add_option("--generation,-g", o->generation, "Generation (default: current)")
      ->check(WholeNumber());
  exp->callback(
      [o, run] { *run = [o] { return RunExport(o->store, o->table, o->out, o->generation); }; });
}

void AddCloneCommand(CLI::App* clone, const std::shared_ptr<DataOptions>& o,
                     std::function<Status()>* run) {
  clone->add_option("SRC", o->store, "Source store")->required();
  clone->add_option("DST", o->dst, "New store directory")->required();
  clone->add_option("--generation,-g", o->generation, "Generation (default: current)")
      ->check(WholeNumber());
  clone->callback([o, run] {
    *run = [o]() -> Status {
      COHORT_ASSIGN_OR_RETURN(uint64_t gen, store::CloneStore(o->store, o->dst, o->generation));
      fmt::print("cloned {} at generation {} into {}\n", o->store, gen, o->dst);
      return Status::OK();
    };
  });
}

// The data subcommands, one row each: a new one is its Add function and a row.
struct DataTool {
  const char* name;
  const char* help;
  void (*add)(CLI::App* command, const std::shared_ptr<DataOptions>& o,
              std::function<Status()>* run);
};
const DataTool kDataTools[] = {
    {"init", "Create an empty store", AddInitCommand},
    {"import", "Append samples from IDX, .npy or CSV files to a table", AddImportCommand},
    {"info", "Show a generation's tables", AddInfoCommand},
    {"log", "List generations with their notes, newest first", AddLogCommand},
    {"diff", "Show samples added and removed between generations", AddDiffCommand},
    {"split", "Move a seeded random (or given) set of samples between tables", AddSplitCommand},
    {"remove", "Remove samples from a table by id", AddRemoveCommand},
    {"verify", "Check every checksum and reference; non-zero exit on damage", AddVerifyCommand},
    {"compact", "Rewrite tables whose dead rows pass a threshold", AddCompactCommand},
    {"prune", "Delete all but the newest generations and the files only they used",
     AddPruneCommand},
    {"export", "Write a table as PREFIX.x.npy, PREFIX.y.npy, PREFIX.ids.npy", AddExportCommand},
    {"clone", "Make a new store starting at a generation of another", AddCloneCommand},
};

}  // namespace

void AddDataCommands(CLI::App& app, std::function<Status()>* run) {
  CLI::App* data = app.add_subcommand("data", "Create, inspect and change a dataset store");
  data->require_subcommand(1);
  auto o = std::make_shared<DataOptions>();
  for (const DataTool& tool : kDataTools) {
    tool.add(data->add_subcommand(tool.name, tool.help), o, run);
  }
}

}  // namespace cohort::cli
