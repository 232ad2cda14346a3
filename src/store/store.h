// Store-level operations that are neither a read of one snapshot nor one transaction:
// creating a store, cloning it, listing its history, verifying it and diffing generations.
//
// Thread-safety: free functions; each takes the writer lock where it writes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/env.h"
#include "store/manifest.h"

namespace cohort::store {

// Creates an empty store at `dir` (the directory may exist and be empty): generation 0
// with no tables. AlreadyExists if `dir` already holds a store.
Status InitStore(const std::string& dir, Env* env = Env::Default());

// Creates a new store at `dst` whose first generation is `generation` (CURRENT's if
// nullopt) of `src`, keeping its number, tables and sample ids; files are hard-linked
// where the filesystem allows, copied otherwise. The new manifest records the origin.
Result<uint64_t> CloneStore(const std::string& src, const std::string& dst,
                            std::optional<uint64_t> generation = {}, Env* env = Env::Default());

// Every committed generation (a manifest at or below CURRENT), oldest first; a damaged
// manifest is an error.
Result<std::vector<Manifest>> ReadHistory(const std::string& dir, Env* env = Env::Default());

// One generation of ReadHistoryEntries: its manifest, or why it cannot be read.
struct HistoryEntry {
  uint64_t generation = 0;
  std::optional<Manifest> manifest;
  std::string damage;  // the manifest's error when it is absent
};
// Every committed generation, oldest first, like ReadHistory, but a damaged manifest is an
// entry saying so instead of an error for the whole history (`cohort data log`).
Result<std::vector<HistoryEntry>> ReadHistoryEntries(const std::string& dir,
                                                     Env* env = Env::Default());

struct VerifyReport {
  uint64_t generations = 0;
  uint64_t files = 0;
  uint64_t bytes = 0;
  std::vector<std::string> problems;  // one line each, naming the file; empty when sound
  // Not damage, but worth a look: manifests newer than CURRENT (CURRENT set back, or an
  // interrupted commit's leftover).
  std::vector<std::string> warnings;
  bool ok() const { return problems.empty(); }
};
// Checks CURRENT (once), every manifest (or only `generation`), and for every file named:
// presence, size, CRC-32, .npy header against the schema, and row refs in range; sample ids
// live at most once in the newest generation checked. Warns about manifests newer than
// CURRENT.
Result<VerifyReport> VerifyStore(const std::string& dir, std::optional<uint64_t> generation = {},
                                 Env* env = Env::Default());

// Checks one generation as `cohort data verify --generation G` does: its manifest and every
// file it names, read in full (presence, size, CRC-32, .npy header, row refs), and that no
// sample id is live twice. OK, or one Corruption line naming the first problem and how many
// more there are. What a run calls before it clones its source generation: O(bytes of the
// generation), so a caller may offer to skip it for huge stores.
Status VerifyGeneration(const std::string& dir, uint64_t generation, Env* env = Env::Default());

struct PruneReport {
  std::vector<uint64_t> removed_generations;
  uint64_t removed_files = 0;
  uint64_t freed_bytes = 0;
};
// Deletes every generation but the newest `keep` (at least 1) and the data files that only
// those generations named. Takes the writer lock. Refuses (deleting nothing) when a file a
// kept generation names is damaged, since an older generation may hold the only sound copy
// of its rows, and when CURRENT was set back behind committed generations. Manifests go first,
// oldest first, then the files no remaining manifest names, so a crash part-way leaves a sound
// store and running it again finishes the job. Readers already holding a pruned generation keep
// reading it (its files stay mapped); opening a pruned generation afterwards is NotFound.
Result<PruneReport> PruneGenerations(const std::string& dir, uint64_t keep,
                                     Env* env = Env::Default());

struct TableDiff {
  std::vector<uint64_t> added;    // ids live in b, not in a
  std::vector<uint64_t> removed;  // ids live in a, not in b
  bool schema_changed = false;
};
// Per table (union of both generations' tables), ascending ids.
Result<std::map<std::string, TableDiff>> DiffGenerations(const std::string& dir, uint64_t a,
                                                         uint64_t b, Env* env = Env::Default());

}  // namespace cohort::store
