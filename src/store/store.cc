#include "store/store.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <set>
#include <unordered_map>

#include "common/file_util.h"
#include "common/time_text.h"
#include "store/snapshot.h"

namespace cohort::store {

namespace {

std::string AbsolutePath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) != nullptr) return buf;
  return path;
}

// Creates `dir` if missing (durably: the parent directory is synced) and takes its writer
// lock. Refuses a store and any directory holding more than an interrupted init or clone
// leaves behind (the store's own kinds of files and at most one manifest, a first
// generation); those leftovers are removed.
Result<std::unique_ptr<FileLock>> PrepareEmptyDir(Env* env, const std::string& dir) {
  Status st = env->CreateDir(dir);
  if (st.ok()) {
    COHORT_RETURN_IF_ERROR(env->SyncDir(ParentDir(dir)));
  } else if (st.code() != Status::Code::kAlreadyExists) {
    return st;
  } else if (env->FileExists(JoinPath(dir, "CURRENT"))) {
    return Status::AlreadyExists(dir + " already holds a cohort store");
  }
  COHORT_ASSIGN_OR_RETURN(auto lock, env->LockFile(JoinPath(dir, "LOCK")));
  COHORT_ASSIGN_OR_RETURN(auto names, env->ListDir(dir));
  std::vector<uint64_t> manifests;
  for (const auto& name : names) {
    StoreFileName f = ClassifyStoreFile(name);
    if (f.kind == StoreFileKind::kOther) {
      return Status::InvalidArgument(dir + " is not empty (it holds " + name +
                                     "); a store needs a directory of its own");
    }
    if (f.kind == StoreFileKind::kManifest) manifests.push_back(f.number);
  }
  // A store that lost CURRENT has a history; an unfinished init or clone has one manifest
  // without a parent (or an unreadable, half-written one).
  bool has_history = manifests.size() > 1;
  if (manifests.size() == 1) {
    auto m = ReadManifest(env, dir, manifests[0]);
    has_history = m.ok() && m->parent.has_value();
  }
  if (has_history) {
    return Status::InvalidArgument(dir +
                                   " holds generations of a store but no CURRENT; "
                                   "refusing to overwrite it (restore CURRENT or move it away)");
  }
  bool removed = false;
  for (const auto& name : names) {
    if (name == "LOCK") continue;
    COHORT_RETURN_IF_ERROR(env->RemoveFile(JoinPath(dir, name)));
    removed = true;
  }
  if (removed) COHORT_RETURN_IF_ERROR(env->SyncDir(dir));
  return lock;
}

Status CommitFirstGeneration(Env* env, const std::string& dir, const Manifest& m) {
  COHORT_RETURN_IF_ERROR(WriteManifest(env, dir, m));  // syncs the directory: the files are durable
  return WriteCurrent(env, dir, m.generation);
}

}  // namespace

Status InitStore(const std::string& dir, Env* env) {
  COHORT_ASSIGN_OR_RETURN(auto lock, PrepareEmptyDir(env, dir));
  Manifest m;
  m.generation = 0;
  m.created = NowIso8601();
  m.note = "init";
  return CommitFirstGeneration(env, dir, m);
}

Result<uint64_t> CloneStore(const std::string& src, const std::string& dst,
                            std::optional<uint64_t> generation, Env* env) {
  COHORT_ASSIGN_OR_RETURN(auto snap, Snapshot::Open(src, generation, env));
  COHORT_ASSIGN_OR_RETURN(auto lock, PrepareEmptyDir(env, dst));
  for (const auto& f : snap->manifest().Files()) {
    COHORT_RETURN_IF_ERROR(env->LinkOrCopyFile(JoinPath(src, f.file), JoinPath(dst, f.file)));
  }
  Manifest m = snap->manifest();
  m.parent.reset();
  m.created = NowIso8601();
  m.origin = Origin{AbsolutePath(src), snap->generation()};
  m.note = "clone of " + m.origin->store + " at generation " + std::to_string(snap->generation());
  COHORT_RETURN_IF_ERROR(CommitFirstGeneration(env, dst, m));
  return m.generation;
}

Result<std::vector<HistoryEntry>> ReadHistoryEntries(const std::string& dir, Env* env) {
  COHORT_ASSIGN_OR_RETURN(uint64_t current, ReadCurrent(env, dir));
  COHORT_ASSIGN_OR_RETURN(auto gens, ListManifestGenerations(env, dir));
  std::vector<HistoryEntry> out;
  for (uint64_t g : gens) {
    if (g > current) continue;  // an unfinished commit; the next writer removes it
    HistoryEntry e;
    e.generation = g;
    auto m = ReadManifest(env, dir, g);
    if (m.ok()) {
      e.manifest = std::move(*m);
    } else {
      e.damage = m.status().message();
    }
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::vector<Manifest>> ReadHistory(const std::string& dir, Env* env) {
  COHORT_ASSIGN_OR_RETURN(uint64_t current, ReadCurrent(env, dir));
  COHORT_ASSIGN_OR_RETURN(auto gens, ListManifestGenerations(env, dir));
  std::vector<Manifest> out;
  for (uint64_t g : gens) {
    if (g > current) continue;  // an unfinished commit; the next writer removes it
    COHORT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(env, dir, g));
    out.push_back(std::move(m));
  }
  return out;
}

namespace {

// Verifies generation `g`: its manifest, every file it names (each file once across calls,
// remembered in `checked`), then its structure (.npy headers, row refs) and, when
// `check_ids`, that no sample id is live twice. Problems go to `report`.
void VerifyOneGeneration(Env* env, const std::string& dir, uint64_t g, bool check_ids,
                         std::map<std::string, bool>* checked, VerifyReport* report) {
  report->generations++;
  auto manifest = ReadManifest(env, dir, g);
  if (!manifest.ok()) {
    report->problems.push_back(manifest.status().message());
    return;
  }
  // Every file first, each once: presence, size and checksum, so one damaged file does not
  // hide another.
  bool files_sound = true;
  for (const auto& f : manifest->Files()) {
    if (auto it = checked->find(f.file); it != checked->end()) {
      files_sound = files_sound && it->second;
      continue;
    }
    Status st = VerifyFileEntry(env, dir, f, g, &report->bytes);
    if (!st.ok()) report->problems.push_back(st.message());
    report->files++;
    (*checked)[f.file] = st.ok();
    files_sound = files_sound && st.ok();
  }
  if (!files_sound) return;
  // Then the structure: .npy headers against the schema, row refs in range. The manifest
  // already read is opened as is: a damaged CURRENT is reported once, not per generation.
  auto snap = Snapshot::OpenManifest(dir, std::move(*manifest), env);
  if (!snap.ok()) {
    report->problems.push_back(snap.status().message());
    return;
  }
  if (!check_ids) return;
  // A sample id is live in at most one table.
  std::unordered_map<uint64_t, std::string> table_of;
  for (const auto& name : (*snap)->table_names()) {
    const Table* t = *(*snap)->table(name);
    for (uint64_t r = 0; r < t->size(); r++) {
      auto [it, inserted] = table_of.emplace(t->id(r), name);
      if (!inserted) {
        report->problems.push_back(JoinPath(dir, t->entry().rows_file.file) + ": sample id " +
                                   std::to_string(t->id(r)) + " is live twice (tables " +
                                   it->second + " and " + name + ")");
        break;
      }
    }
  }
}

std::string GenerationRange(const std::vector<uint64_t>& gens) {
  return std::to_string(gens.front()) +
         (gens.size() > 1 ? ".." + std::to_string(gens.back()) : std::string());
}

}  // namespace

Result<VerifyReport> VerifyStore(const std::string& dir, std::optional<uint64_t> generation,
                                 Env* env) {
  VerifyReport report;
  if (!env->FileExists(dir)) return Status::NotFound(dir + " does not exist");
  auto current = ReadCurrent(env, dir);
  if (!current.ok()) {
    if (current.status().IsNotFound()) return current.status();
    report.problems.push_back(current.status().message());
  }
  COHORT_ASSIGN_OR_RETURN(auto all, ListManifestGenerations(env, dir));
  std::vector<uint64_t> gens;
  if (generation) {
    gens.push_back(*generation);
  } else {
    for (uint64_t g : all) {
      if (!current.ok() || g <= *current) gens.push_back(g);
    }
    if (current.ok() && std::find(gens.begin(), gens.end(), *current) == gens.end()) {
      report.problems.push_back(JoinPath(dir, "CURRENT") + ": names generation " +
                                std::to_string(*current) + ", which has no manifest");
    }
  }
  if (current.ok()) {
    std::vector<uint64_t> newer;
    for (uint64_t g : all) {
      if (g > *current) newer.push_back(g);
    }
    std::optional<uint64_t> leftover;
    if (!CheckNothingCommittedAfter(dir, *current, all, &leftover).ok()) {
      report.warnings.push_back(JoinPath(dir, "CURRENT") + " names generation " +
                                std::to_string(*current) + ", but generations " +
                                GenerationRange(newer) +
                                " have manifests: CURRENT was set back; writers refuse this "
                                "store until CURRENT names generation " +
                                std::to_string(newer.back()) + " again or those are deleted");
    } else if (leftover) {
      report.warnings.push_back(
          JoinPath(dir, ManifestFileName(*leftover)) + ": generation " + std::to_string(*leftover) +
          " is newer than CURRENT (" + std::to_string(*current) +
          "): an interrupted commit, or CURRENT set back one generation; the next writer "
          "removes it");
    }
  }
  std::map<std::string, bool> checked;  // file -> sound; files are shared across generations
  for (uint64_t g : gens) {
    // Ids are checked for the newest generation verified.
    VerifyOneGeneration(env, dir, g, g == gens.back(), &checked, &report);
  }
  return report;
}

Status VerifyGeneration(const std::string& dir, uint64_t generation, Env* env) {
  // A generation that does not exist is NotFound, as for a reader, not damage.
  COHORT_RETURN_IF_ERROR(ReadManifest(env, dir, generation).status());
  VerifyReport report;
  std::map<std::string, bool> checked;
  VerifyOneGeneration(env, dir, generation, /*check_ids=*/true, &checked, &report);
  if (report.ok()) return Status::OK();
  std::string more;
  if (report.problems.size() > 1) {
    more = " (and " + std::to_string(report.problems.size() - 1) + " more problem(s))";
  }
  return Status::Corruption("generation " + std::to_string(generation) + " of " + dir +
                            " is damaged: " + report.problems.front() + more);
}

Result<PruneReport> PruneGenerations(const std::string& dir, uint64_t keep, Env* env) {
  if (keep == 0) return Status::InvalidArgument("prune must keep at least one generation");
  COHORT_RETURN_IF_ERROR(ReadCurrent(env, dir).status());
  COHORT_ASSIGN_OR_RETURN(auto lock, env->LockFile(JoinPath(dir, "LOCK")));
  COHORT_ASSIGN_OR_RETURN(uint64_t current, ReadCurrent(env, dir));
  COHORT_ASSIGN_OR_RETURN(auto gens, ListManifestGenerations(env, dir));
  std::optional<uint64_t> leftover;
  COHORT_RETURN_IF_ERROR(CheckNothingCommittedAfter(dir, current, gens, &leftover));
  COHORT_ASSIGN_OR_RETURN(Manifest newest, ReadManifest(env, dir, current));
  PruneReport report;
  std::map<std::string, std::pair<FileEntry, uint64_t>> referenced;  // file -> entry, generation
  for (uint64_t g : gens) {
    if (g > current) continue;  // an unfinished commit: the next writer's to clean up
    if (current - g >= keep) {
      report.removed_generations.push_back(g);
      continue;
    }
    COHORT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(env, dir, g));
    for (const auto& f : m.Files()) referenced.emplace(f.file, std::make_pair(f, g));
  }
  // Older generations may hold the only sound copy of rows a kept generation has damaged
  // (a compaction copied them): nothing is deleted unless what stays is sound.
  if (!report.removed_generations.empty()) {
    for (const auto& [name, entry] : referenced) {
      Status st = VerifyFileEntry(env, dir, entry.first, entry.second);
      if (!st.ok()) {
        return Status::Corruption("refusing to prune " + dir + ": a generation it keeps is " +
                                  "damaged: " + st.message());
      }
    }
  }
  for (uint64_t g : report.removed_generations) {
    COHORT_RETURN_IF_ERROR(env->RemoveFile(JoinPath(dir, ManifestFileName(g))));
  }
  COHORT_RETURN_IF_ERROR(env->SyncDir(dir));
  COHORT_ASSIGN_OR_RETURN(auto names, env->ListDir(dir));
  for (const auto& name : names) {
    if (!IsStoreDataFileName(name) || referenced.count(name) > 0) continue;
    // Files of an unfinished commit are newer than CURRENT's counters; leave them to the writer.
    if (IsUncommittedFile(name, current, newest.next_segment)) continue;
    std::string path = JoinPath(dir, name);
    auto size = env->FileSize(path);
    COHORT_RETURN_IF_ERROR(env->RemoveFile(path));
    report.removed_files++;
    if (size.ok()) report.freed_bytes += *size;
  }
  COHORT_RETURN_IF_ERROR(env->SyncDir(dir));
  return report;
}

Result<std::map<std::string, TableDiff>> DiffGenerations(const std::string& dir, uint64_t a,
                                                         uint64_t b, Env* env) {
  COHORT_ASSIGN_OR_RETURN(auto sa, Snapshot::Open(dir, a, env));
  COHORT_ASSIGN_OR_RETURN(auto sb, Snapshot::Open(dir, b, env));
  std::set<std::string> names;
  for (const auto& n : sa->table_names()) names.insert(n);
  for (const auto& n : sb->table_names()) names.insert(n);
  std::map<std::string, TableDiff> out;
  for (const auto& name : names) {
    std::vector<uint64_t> ids_a;
    std::vector<uint64_t> ids_b;
    const Table* ta = sa->has_table(name) ? *sa->table(name) : nullptr;
    const Table* tb = sb->has_table(name) ? *sb->table(name) : nullptr;
    if (ta != nullptr) ids_a = ta->Ids();
    if (tb != nullptr) ids_b = tb->Ids();
    std::sort(ids_a.begin(), ids_a.end());
    std::sort(ids_b.begin(), ids_b.end());
    TableDiff d;
    std::set_difference(ids_b.begin(), ids_b.end(), ids_a.begin(), ids_a.end(),
                        std::back_inserter(d.added));
    std::set_difference(ids_a.begin(), ids_a.end(), ids_b.begin(), ids_b.end(),
                        std::back_inserter(d.removed));
    d.schema_changed = ta != nullptr && tb != nullptr && !(ta->schema() == tb->schema());
    out[name] = std::move(d);
  }
  return out;
}

}  // namespace cohort::store
