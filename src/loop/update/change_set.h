// ChangeSet: how an update step (a user's program, or a built-in step) asks to change the
// dataset between rounds, read and checked in full against the generation it was made from
// before anything is written (docs/updates.md).
//
// A change set is a directory holding `changes.json` and the .npy files it names:
//
//   {"add":     [{"table": "train", "features": "add-train-x.npy", "labels": "add-train-y.npy"}],
//    "remove":  [{"table": "train", "ids": "remove-train.npy"}],
//    "move":    [{"from": "pool", "to": "train", "ids": "move-ids.npy", "labels": "move-y.npy"}],
//    "relabel": [{"table": "train", "ids": "relabel-ids.npy", "labels": "relabel-y.npy"}]}
//
// Every key is optional, and so is every list entry's `labels` for a move (the rows then keep
// the labels they have). Paths are relative to the directory and may not leave it. Ids files
// are 1-D uint64 (or int64 without negative values) .npy arrays of sample ids live in the
// named table at the base generation; features are (n, *feature_shape) in the table's feature
// dtype, labels (n,) int64 for class tables or (n, *label_shape) float32 for vector tables,
// with n the row count of the features or ids beside them. Nothing is converted: an array of
// another dtype or shape is refused. A sample id may appear once in the whole change set.
// Float features and labels must be finite; class labels lie in [0, classes) when the run
// knows its class count. Every refusal is one line naming changes.json, the entry
// ("move[0]"), and the table, file or sample ids at fault.
//
// ApplyChangeSet applies a checked change set to a transaction in a fixed order: relabel,
// remove, move, add (each list in file order); the caller commits.
//
// Thread-safety: pure functions of their arguments (ReadChangeSet reads files, writes none);
// a ChangeSet is a plain value.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/host_array.h"
#include "store/snapshot.h"
#include "store/transaction.h"

namespace cohort::loop {

// The file a change set's directory holds its operations in.
inline constexpr const char* kChangesFileName = "changes.json";

struct ChangeSetAdd {
  std::string where;  // "DIR/changes.json: add[0] (table train)", for messages
  std::string table;
  store::HostArray features;
  std::optional<store::HostArray> labels;  // absent exactly when the table has no labels
};

struct ChangeSetRemove {
  std::string where;
  std::string table;
  std::vector<uint64_t> ids;
};

struct ChangeSetMove {
  std::string where;
  std::string from;
  std::string to;
  std::vector<uint64_t> ids;
  std::optional<store::HostArray> labels;  // absent: the rows carry their labels
};

struct ChangeSetRelabel {
  std::string where;
  std::string table;
  std::vector<uint64_t> ids;
  store::HostArray labels;
};

struct ChangeSet {
  std::string file;  // the changes.json it was read from
  uint64_t base_generation = 0;
  std::vector<ChangeSetRelabel> relabel;
  std::vector<ChangeSetRemove> remove;
  std::vector<ChangeSetMove> move;
  std::vector<ChangeSetAdd> add;

  // Whether applying it would change no row: no entries, or only empty arrays.
  bool empty() const;
};

// Rows one table gained, lost or had relabelled; a move counts as moved_out of its source and
// moved_in to its destination.
struct TableChangeCounts {
  uint64_t added = 0;
  uint64_t removed = 0;
  uint64_t moved_in = 0;
  uint64_t moved_out = 0;
  uint64_t relabelled = 0;
  bool operator==(const TableChangeCounts&) const = default;
};

struct ChangeCounts {
  std::map<std::string, TableChangeCounts> tables;  // only tables whose rows changed
  // The sample ids given to the rows of each add entry, in the order of ChangeSet::add (empty
  // for an entry without rows).
  std::vector<std::vector<uint64_t>> added_ids;
};

// Reads `dir`/changes.json and the arrays it names, and checks them against `base` and one
// another as the header says. `classes` is the run's class count; 0 skips the range check of
// class labels. NotFound or InvalidArgument (a one-line message, see above) when anything is
// wrong; IOError when a file cannot be read.
Result<ChangeSet> ReadChangeSet(const std::string& dir, const store::Snapshot& base,
                                int64_t classes);

// Applies `changes` to `txn`, which must start from the generation the change set was checked
// against, in the order relabel, remove, move, add; does not commit. On an error the
// transaction is partly changed: the caller drops it (the store stays as it was).
Result<ChangeCounts> ApplyChangeSet(const ChangeSet& changes, store::Transaction* txn);

}  // namespace cohort::loop
