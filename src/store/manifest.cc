#include "store/manifest.h"

#include <zlib.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "common/json_text.h"

namespace cohort::store {

using nlohmann::json;

namespace {

std::string Padded(uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%06" PRIu64, n);
  return buf;
}

std::string Hex8(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

json FileToJson(const FileEntry& f) {
  return {{"file", f.file}, {"bytes", f.bytes}, {"crc32", f.crc32}};
}

FileEntry FileFromJson(const json& j) {
  FileEntry f;
  f.file = j.at("file").get<std::string>();
  f.bytes = JsonUint(j.at("bytes"));
  f.crc32 = static_cast<uint32_t>(JsonUint(j.at("crc32"), UINT32_MAX));
  return f;
}

constexpr std::string_view kTrailer = "#crc32=";

}  // namespace

std::vector<FileEntry> Manifest::Files() const {
  std::vector<FileEntry> out;
  std::set<std::string> seen;
  auto add = [&](const FileEntry& f) {
    if (seen.insert(f.file).second) out.push_back(f);
  };
  for (const auto& [name, table] : tables) {
    add(table.rows_file);
    for (const auto& seg : table.segments) {
      add(seg.x);
      if (seg.y) add(*seg.y);
      add(seg.ids);
    }
  }
  return out;
}

std::string ManifestFileName(uint64_t generation) { return "gen-" + Padded(generation) + ".json"; }

std::string RowsFileName(const std::string& table, uint64_t generation) {
  return table + "-gen-" + Padded(generation) + ".rows.npy";
}

std::string SegmentFileName(const std::string& table, uint64_t segment, const char* kind) {
  return table + "-seg-" + Padded(segment) + "." + kind + ".npy";
}

std::optional<uint64_t> ParseManifestFileName(std::string_view name) {
  if (name.size() < 4 + 6 + 5 || name.substr(0, 4) != "gen-" ||
      name.substr(name.size() - 5) != ".json") {
    return std::nullopt;
  }
  std::string_view digits = name.substr(4, name.size() - 9);
  uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9' || v > UINT64_MAX / 10 - 1) return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

namespace {
bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool IsTableName(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

// Parses "<table><marker><digits><suffix>" ("train" "-seg-" "000017" ".x.npy").
std::optional<uint64_t> NumberedName(std::string_view name, std::string_view marker,
                                     std::string_view suffix) {
  if (!EndsWith(name, suffix)) return std::nullopt;
  name.remove_suffix(suffix.size());
  size_t at = name.rfind(marker);
  if (at == std::string_view::npos || !IsTableName(name.substr(0, at))) return std::nullopt;
  std::string_view digits = name.substr(at + marker.size());
  if (digits.size() < 6 || digits.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}
}  // namespace

StoreFileName ClassifyStoreFile(std::string_view name) {
  if (name == "LOCK") return {StoreFileKind::kLock, 0};
  if (name == "CURRENT") return {StoreFileKind::kCurrent, 0};
  if (name == "CURRENT.tmp") return {StoreFileKind::kTemp, 0};
  if (EndsWith(name, ".json.tmp")) {
    if (auto g = ParseManifestFileName(name.substr(0, name.size() - 4))) {
      return {StoreFileKind::kTemp, *g};
    }
  }
  if (auto g = ParseManifestFileName(name)) return {StoreFileKind::kManifest, *g};
  if (auto g = NumberedName(name, "-gen-", ".rows.npy")) return {StoreFileKind::kRows, *g};
  for (std::string_view suffix : {".x.npy", ".y.npy", ".id.npy"}) {
    if (auto s = NumberedName(name, "-seg-", suffix)) return {StoreFileKind::kSegment, *s};
  }
  return {};
}

bool IsUncommittedFile(std::string_view name, uint64_t current, uint64_t next_segment) {
  StoreFileName f = ClassifyStoreFile(name);
  switch (f.kind) {
    case StoreFileKind::kTemp:
      return true;
    case StoreFileKind::kManifest:
    case StoreFileKind::kRows:
      return f.number > current;
    case StoreFileKind::kSegment:
      return f.number >= next_segment;
    default:
      return false;
  }
}

uint32_t Crc32(std::span<const std::byte> data, uint32_t crc) {
  const auto* p = reinterpret_cast<const Bytef*>(data.data());
  size_t n = data.size();
  uLong c = crc;
  while (n > 0) {
    uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = ::crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(c);
}

uint32_t Crc32(std::string_view data, uint32_t crc) {
  return Crc32(std::as_bytes(std::span<const char>(data.data(), data.size())), crc);
}

std::string EncodeManifest(const Manifest& m) {
  json j;
  j["format"] = "cohort-store";
  j["format_version"] = kFormatVersion;
  j["generation"] = m.generation;
  j["parent"] = m.parent ? json(*m.parent) : json(nullptr);
  j["created"] = m.created;
  j["note"] = m.note;
  j["next_segment"] = m.next_segment;
  j["next_sample_id"] = m.next_sample_id;
  if (m.origin) j["origin"] = {{"store", m.origin->store}, {"generation", m.origin->generation}};
  json tables = json::object();
  for (const auto& [name, t] : m.tables) {
    json jt = SchemaToJson(t.schema);
    json rows = FileToJson(t.rows_file);
    rows["count"] = t.row_count;
    jt["rows"] = rows;
    json segs = json::array();
    for (const auto& s : t.segments) {
      json js = {{"id", s.id}, {"rows", s.rows}, {"x", FileToJson(s.x)}};
      if (s.y) js["y"] = FileToJson(*s.y);
      js["ids"] = FileToJson(s.ids);
      segs.push_back(js);
    }
    jt["segments"] = segs;
    tables[name] = jt;
  }
  j["tables"] = tables;
  // Notes and paths come from users; invalid UTF-8 is replaced rather than thrown on.
  std::string body = j.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
  return body + std::string(kTrailer) + Hex8(Crc32(body)) + "\n";
}

Result<Manifest> DecodeManifest(std::string_view text, const std::string& path) {
  // Body, then the trailer line "#crc32=xxxxxxxx\n".
  if (text.empty() || text.back() != '\n') {
    return Status::Corruption(path + ": manifest is truncated (no checksum trailer)");
  }
  size_t cut = text.rfind('\n', text.size() - 2);
  std::string_view body = text.substr(0, cut == std::string_view::npos ? 0 : cut + 1);
  std::string_view trailer = text.substr(body.size(), text.size() - body.size() - 1);
  if (cut == std::string_view::npos || trailer.substr(0, kTrailer.size()) != kTrailer) {
    return Status::Corruption(path + ": manifest is truncated (no checksum trailer)");
  }
  std::string expected = Hex8(Crc32(body));
  if (trailer.substr(kTrailer.size()) != expected) {
    return Status::Corruption(path + ": manifest checksum mismatch (stored " +
                              std::string(trailer.substr(kTrailer.size())) + ", computed " +
                              expected + ")");
  }
  Manifest m;
  try {
    json j = json::parse(body);
    if (j.at("format").get<std::string>() != "cohort-store") {
      return Status::Corruption(path + ": not a cohort store manifest");
    }
    const int64_t version = JsonInt(j.at("format_version"));
    if (version != kFormatVersion) {
      return Status::Corruption(path + ": format_version " + std::to_string(version) +
                                " is not supported (this cohort reads version " +
                                std::to_string(kFormatVersion) + ")");
    }
    m.generation = JsonUint(j.at("generation"));
    if (!j.at("parent").is_null()) m.parent = JsonUint(j.at("parent"));
    m.created = j.at("created").get<std::string>();
    m.note = j.at("note").get<std::string>();
    m.next_segment = JsonUint(j.at("next_segment"));
    m.next_sample_id = JsonUint(j.at("next_sample_id"));
    if (j.contains("origin")) {
      m.origin = Origin{j["origin"].at("store").get<std::string>(),
                        JsonUint(j["origin"].at("generation"))};
    }
    for (const auto& [name, jt] : j.at("tables").items()) {
      std::string where = path + ": table " + name;
      COHORT_RETURN_IF_ERROR(ValidateTableName(name).WithContext(path));
      TableEntry t;
      COHORT_ASSIGN_OR_RETURN(t.schema, SchemaFromJson(jt.at("features"), jt.at("labels"), where));
      t.rows_file = FileFromJson(jt.at("rows"));
      t.row_count = JsonUint(jt.at("rows").at("count"));
      for (const auto& js : jt.at("segments")) {
        SegmentEntry s;
        s.id = JsonUint(js.at("id"));
        s.rows = JsonUint(js.at("rows"));
        s.x = FileFromJson(js.at("x"));
        if (js.contains("y")) s.y = FileFromJson(js.at("y"));
        s.ids = FileFromJson(js.at("ids"));
        if (s.y.has_value() != t.schema.has_labels()) {
          return Status::Corruption(where + ": segment " + std::to_string(s.id) +
                                    (t.schema.has_labels() ? " has no labels file"
                                                           : " has labels but the table has none"));
        }
        t.segments.push_back(std::move(s));
      }
      m.tables.emplace(name, std::move(t));
    }
  } catch (const json::exception& e) {
    return Status::Corruption(path + ": malformed manifest: " + e.what());
  }
  return m;
}

Result<Manifest> ReadManifest(Env* env, const std::string& dir, uint64_t generation) {
  std::string path = JoinPath(dir, ManifestFileName(generation));
  auto text = env->ReadFileToString(path);
  if (!text.ok()) {
    if (text.status().IsNotFound()) {
      return Status::NotFound("generation " + std::to_string(generation) + " does not exist in " +
                              dir + " (no " + ManifestFileName(generation) + ")");
    }
    return text.status();
  }
  COHORT_ASSIGN_OR_RETURN(Manifest m, DecodeManifest(*text, path));
  if (m.generation != generation) {
    return Status::Corruption(path + ": names generation " + std::to_string(m.generation));
  }
  return m;
}

Result<uint64_t> ReadCurrent(Env* env, const std::string& dir) {
  std::string path = JoinPath(dir, "CURRENT");
  auto text = env->ReadFileToString(path);
  if (!text.ok()) {
    if (text.status().IsNotFound()) {
      if (!env->FileExists(dir)) return Status::NotFound(dir + " does not exist");
      return Status::NotFound(dir +
                              " is not a cohort store (no CURRENT file; create one with "
                              "`cohort data init`)");
    }
    return text.status();
  }
  // "gen-000042 9f3c2a10\n"
  const std::string& s = *text;
  size_t space = s.find(' ');
  if (space == std::string::npos || s.size() != space + 1 + 8 + 1 || s.back() != '\n') {
    return Status::Corruption(path + ": malformed (expected \"gen-NNNNNN CRC32\\n\")");
  }
  std::string name = s.substr(0, space);
  if (s.substr(space + 1, 8) != Hex8(Crc32(name))) {
    return Status::Corruption(path + ": checksum mismatch");
  }
  auto gen = ParseManifestFileName(name + ".json");
  if (!gen) return Status::Corruption(path + ": malformed generation name '" + name + "'");
  return *gen;
}

Status WriteCurrent(Env* env, const std::string& dir, uint64_t generation) {
  std::string name = "gen-" + Padded(generation);
  return WriteFileAtomically(env, JoinPath(dir, "CURRENT"), name + " " + Hex8(Crc32(name)) + "\n");
}

Status WriteManifest(Env* env, const std::string& dir, const Manifest& manifest) {
  return WriteFileAtomically(env, JoinPath(dir, ManifestFileName(manifest.generation)),
                             EncodeManifest(manifest));
}

Result<std::vector<uint64_t>> ListManifestGenerations(Env* env, const std::string& dir) {
  COHORT_ASSIGN_OR_RETURN(auto names, env->ListDir(dir));
  std::vector<uint64_t> gens;
  for (const auto& n : names) {
    if (auto g = ParseManifestFileName(n)) gens.push_back(*g);
  }
  std::sort(gens.begin(), gens.end());
  return gens;
}

Status VerifyFileEntry(Env* env, const std::string& dir, const FileEntry& f, uint64_t generation,
                       uint64_t* bytes_read) {
  const std::string path = JoinPath(dir, f.file);
  auto mapped = env->MapReadOnly(path);
  if (!mapped.ok()) {
    if (mapped.status().IsNotFound()) {
      return Status::NotFound(path + ": file named by generation " + std::to_string(generation) +
                              " is missing");
    }
    return mapped.status();
  }
  const uint64_t size = (*mapped)->size();
  if (size != f.bytes) {
    return Status::Corruption(path + ": size " + std::to_string(size) +
                              " bytes, manifest of generation " + std::to_string(generation) +
                              " says " + std::to_string(f.bytes));
  }
  const uint32_t crc = Crc32(std::span<const std::byte>((*mapped)->data(), size));
  if (bytes_read != nullptr) *bytes_read += size;
  if (crc != f.crc32) {
    return Status::Corruption(path + ": checksum mismatch (manifest of generation " +
                              std::to_string(generation) + " says " + std::to_string(f.crc32) +
                              ", file has " + std::to_string(crc) + ")");
  }
  return Status::OK();
}

Status CheckNothingCommittedAfter(const std::string& dir, uint64_t current,
                                  const std::vector<uint64_t>& generations,
                                  std::optional<uint64_t>* leftover) {
  std::vector<uint64_t> newer;
  for (uint64_t g : generations) {
    if (g > current) newer.push_back(g);
  }
  leftover->reset();
  if (newer.empty()) return Status::OK();
  if (newer.size() == 1 && newer[0] == current + 1) {
    *leftover = newer[0];
    return Status::OK();
  }
  const std::string range =
      std::to_string(newer.front()) + (newer.size() > 1 ? ".." + std::to_string(newer.back()) : "");
  return Status::Corruption(
      JoinPath(dir, "CURRENT") + " names generation " + std::to_string(current) +
      ", but generations " + range +
      " were committed after it (CURRENT set back?); refusing to write, which would delete "
      "them: point CURRENT at generation " +
      std::to_string(newer.back()) + " again, or delete " + ManifestFileName(newer.front()) +
      (newer.size() > 1 ? ".." + ManifestFileName(newer.back()) : "") +
      " to drop them (docs/reliability.md)");
}

}  // namespace cohort::store
