// Manifest: what one generation of a store is, and the files that name generations.
//
// A manifest lists, for every table, its schema, its live-rows file and the segments those
// rows point into, with each file's size and CRC-32. Manifests and CURRENT are the only
// store files ever replaced atomically; docs/store-format.md is the normative description.
//
// Thread-safety: free functions; Manifest is a plain value.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "store/env.h"
#include "store/schema.h"

namespace cohort::store {

inline constexpr int kFormatVersion = 1;

struct FileEntry {
  std::string file;  // base name inside the store directory
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

struct SegmentEntry {
  uint64_t id = 0;
  uint64_t rows = 0;
  FileEntry x;
  std::optional<FileEntry> y;  // absent when the table has no labels
  FileEntry ids;
};

struct TableEntry {
  TableSchema schema;
  FileEntry rows_file;
  uint64_t row_count = 0;
  std::vector<SegmentEntry> segments;
};

struct Origin {
  std::string store;
  uint64_t generation = 0;
};

struct Manifest {
  uint64_t generation = 0;
  std::optional<uint64_t> parent;
  std::string created;  // ISO 8601 UTC with milliseconds
  std::string note;
  uint64_t next_segment = 0;
  uint64_t next_sample_id = 0;
  std::optional<Origin> origin;
  std::map<std::string, TableEntry> tables;

  // Every file this generation names (segments and rows files), each once.
  std::vector<FileEntry> Files() const;
};

// Row refs in rows files: segment id in the high 32 bits, row within the segment below.
inline uint64_t MakeRowRef(uint64_t segment, uint64_t row) { return (segment << 32) | row; }
inline uint64_t RefSegment(uint64_t ref) { return ref >> 32; }
inline uint64_t RefRow(uint64_t ref) { return ref & 0xffffffffu; }

std::string ManifestFileName(uint64_t generation);                        // gen-000042.json
std::string RowsFileName(const std::string& table, uint64_t generation);  // T-gen-000042.rows.npy
// kind is "x", "y" or "id": T-seg-000017.x.npy
std::string SegmentFileName(const std::string& table, uint64_t segment, const char* kind);
// Parses "gen-000042.json" -> 42; nullopt for other names.
std::optional<uint64_t> ParseManifestFileName(std::string_view name);

// What a file in a store directory is, judged by its name alone. Only kinds other than
// kOther are ever created, renamed or deleted by the store; a user's own files are kOther.
enum class StoreFileKind {
  kOther,
  kLock,      // LOCK
  kCurrent,   // CURRENT
  kTemp,      // CURRENT.tmp, gen-NNNNNN.json.tmp: a write in progress
  kManifest,  // gen-NNNNNN.json; number = generation
  kSegment,   // T-seg-NNNNNN.{x,y,id}.npy; number = segment id
  kRows,      // T-gen-NNNNNN.rows.npy; number = generation
};
struct StoreFileName {
  StoreFileKind kind = StoreFileKind::kOther;
  uint64_t number = 0;
};
StoreFileName ClassifyStoreFile(std::string_view name);

inline bool IsStoreDataFileName(std::string_view name) {
  StoreFileKind k = ClassifyStoreFile(name).kind;
  return k == StoreFileKind::kSegment || k == StoreFileKind::kRows;
}
// True for a file that no generation up to `current` can name and that only an unfinished
// commit leaves: a temp file, a manifest of a later generation, a segment numbered at or
// above current's `next_segment`, or a rows file of a later generation (counters only grow).
bool IsUncommittedFile(std::string_view name, uint64_t current, uint64_t next_segment);

uint32_t Crc32(std::span<const std::byte> data, uint32_t crc = 0);
uint32_t Crc32(std::string_view data, uint32_t crc = 0);

// The manifest text with its "#crc32=" trailer.
std::string EncodeManifest(const Manifest& manifest);
// `path` names the file in error messages.
Result<Manifest> DecodeManifest(std::string_view text, const std::string& path);

Result<Manifest> ReadManifest(Env* env, const std::string& dir, uint64_t generation);
// The generation CURRENT names. NotFound if the directory is not a store.
Result<uint64_t> ReadCurrent(Env* env, const std::string& dir);
// Writes CURRENT.tmp, syncs it, renames it over CURRENT, syncs the directory.
Status WriteCurrent(Env* env, const std::string& dir, uint64_t generation);
// Writes gen-N.json via a synced temp file and a rename, then syncs the directory, which makes
// every file created in it before (the generation's segments and rows files) durable too.
Status WriteManifest(Env* env, const std::string& dir, const Manifest& manifest);
// Generations that have a manifest file in `dir`, ascending.
Result<std::vector<uint64_t>> ListManifestGenerations(Env* env, const std::string& dir);

// Checks one file generation `generation` names, reading all of it: present, `f.bytes`
// long, with CRC-32 `f.crc32`. Corruption (NotFound when missing) naming the file and the
// generation. Adds the bytes read to *bytes_read if given.
Status VerifyFileEntry(Env* env, const std::string& dir, const FileEntry& f, uint64_t generation,
                       uint64_t* bytes_read = nullptr);

// Generations committed after `current` cannot leave more than one manifest newer than
// CURRENT behind: a commit interrupted between its manifest and CURRENT leaves one, numbered
// current + 1, and the next writer removes it. Anything more means CURRENT was set back by
// hand (or by a restore), and a writer must not delete those generations.
// OK when no manifest is newer than `current`, or only current + 1 (`*leftover` set to it);
// otherwise Corruption naming CURRENT, the generations and the ways on.
Status CheckNothingCommittedAfter(const std::string& dir, uint64_t current,
                                  const std::vector<uint64_t>& generations,
                                  std::optional<uint64_t>* leftover);

}  // namespace cohort::store
