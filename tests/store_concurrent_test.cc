// Readers against a writer in another process.
//
// StoreConcurrentTest holds a Snapshot while store_crash_child, a separate writer process,
// commits many generations to the same store. A reader thread keeps reading every table of
// the held snapshot through its zero-copy pointers and checks that the CRC-32 of its
// features, labels and ids never moves from what it was right after opening; meanwhile the
// main thread keeps opening the newest generation, which must always be a whole, verified
// one and never older than the one opened before it.
//
// Environment: COHORT_TEST_TMP names the directory for scratch stores (ctest sets it).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "common/status.h"
#include "store/env.h"
#include "store/manifest.h"
#include "store/snapshot.h"
#include "store/store.h"
#include "store/test_util.h"

#ifndef STORE_CRASH_CHILD_PATH
#error "STORE_CRASH_CHILD_PATH must name the store_crash_child executable"
#endif

namespace cohort::store {
namespace {

using ::cohort::testing::ChildProcess;

namespace fs = std::filesystem;

constexpr uint64_t kWriterGenerations = 32;

struct TableChecksums {
  uint64_t rows = 0;
  uint32_t features = 0;
  uint32_t labels = 0;
  uint32_t ids = 0;
  bool operator==(const TableChecksums&) const = default;
};

using SnapshotChecksums = std::map<std::string, TableChecksums>;

// CRC-32 of every table's features, labels and ids, read row by row through the snapshot's
// pointers into its mapped files.
SnapshotChecksums Checksums(const Snapshot& snapshot) {
  SnapshotChecksums out;
  for (const auto& name : snapshot.table_names()) {
    const Table* table = *snapshot.table(name);
    const size_t feature_bytes = table->schema().feature_row_bytes();
    const size_t label_bytes = table->schema().label_row_bytes();
    TableChecksums& sums = out[name];
    sums.rows = table->size();
    for (uint64_t row = 0; row < table->size(); row++) {
      sums.features =
          Crc32(std::span<const std::byte>(table->features(row), feature_bytes), sums.features);
      if (table->label(row) != nullptr) {
        sums.labels =
            Crc32(std::span<const std::byte>(table->label(row), label_bytes), sums.labels);
      }
      const uint64_t id = table->id(row);
      sums.ids = Crc32(std::as_bytes(std::span<const uint64_t>(&id, 1)), sums.ids);
    }
  }
  return out;
}

std::string Describe(const SnapshotChecksums& sums) {
  std::ostringstream out;
  for (const auto& [name, t] : sums) {
    out << name << ": " << t.rows << " rows, crc32 features " << t.features << " labels "
        << t.labels << " ids " << t.ids << "; ";
  }
  return out.str();
}

// Runs the writer to its end, `count` generations from `start`, without fsync.
void PrepareStore(const std::string& store, uint64_t count) {
  ASSERT_TRUE(InitStore(store).ok());
  ChildProcess writer;
  ASSERT_TRUE(
      writer.Start({STORE_CRASH_CHILD_PATH, "--no-sync", store, "0", std::to_string(count)}).ok());
  std::string output = writer.ReadOutput();
  std::optional<int> status;
  while (!(status = writer.Poll())) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << output;
}

class StoreConcurrentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::cohort::store::testing::ScratchDir();
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  std::string dir_;
};

TEST_F(StoreConcurrentTest, HeldSnapshotNeverChangesWhileAnotherProcessCommits) {
  const std::string store = (fs::path(dir_) / "store").string();
  ASSERT_NO_FATAL_FAILURE(PrepareStore(store, 3));

  auto held = Snapshot::Open(store);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  const uint64_t held_generation = (*held)->generation();
  const SnapshotChecksums expected = Checksums(**held);
  ASSERT_EQ(expected.size(), 2u) << Describe(expected);

  ChildProcess writer;
  ASSERT_TRUE(writer
                  .Start({STORE_CRASH_CHILD_PATH, store, std::to_string(held_generation),
                          std::to_string(kWriterGenerations)})
                  .ok());

  // Reader of the held snapshot, on a thread of its own.
  std::atomic<bool> writer_done{false};
  std::atomic<uint64_t> held_reads{0};
  std::atomic<uint64_t> held_mismatches{0};
  std::mutex first_mismatch_mu;
  std::string first_mismatch;
  std::thread reader([&] {
    while (!writer_done.load()) {
      SnapshotChecksums now = Checksums(**held);
      held_reads++;
      if (!(now == expected)) {
        if (held_mismatches++ == 0) {
          std::lock_guard<std::mutex> guard(first_mismatch_mu);
          first_mismatch = Describe(now);
        }
      }
    }
  });
  // Stops and joins the reader however this test ends.
  struct StopReader {
    std::atomic<bool>& done;
    std::thread& thread;
    ~StopReader() {
      done = true;
      if (thread.joinable()) thread.join();
    }
  } stop_reader{writer_done, reader};

  // Meanwhile: open the newest generation again and again.
  std::set<uint64_t> generations_seen;
  uint64_t last_generation = held_generation;
  uint64_t opens = 0;
  std::optional<int> writer_status;
  while (!(writer_status = writer.Poll())) {
    auto snapshot = Snapshot::Open(store);
    ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
    const uint64_t generation = (*snapshot)->generation();
    EXPECT_GE(generation, last_generation);
    last_generation = generation;
    opens++;
    if (generations_seen.insert(generation).second) {
      auto report = VerifyStore(store, generation);
      ASSERT_TRUE(report.ok()) << report.status().ToString();
      EXPECT_TRUE(report->ok()) << "generation " << generation << ": " << report->problems.front();
    }
    (void)Checksums(**snapshot);  // reads every mapped byte of the new generation
  }
  writer_done = true;
  reader.join();

  const std::string output = writer.ReadOutput();
  ASSERT_TRUE(WIFEXITED(*writer_status) && WEXITSTATUS(*writer_status) == 0) << output;
  auto current = ReadCurrent(Env::Default(), store);
  ASSERT_TRUE(current.ok());
  EXPECT_EQ(*current, held_generation + kWriterGenerations);

  EXPECT_EQ(held_mismatches.load(), 0u)
      << "held snapshot of generation " << held_generation << " changed: " << first_mismatch
      << "\nexpected: " << Describe(expected);
  EXPECT_GT(held_reads.load(), 0u);
  // The held snapshot still reads the same after the writer is gone, and so does a fresh one
  // of its generation.
  EXPECT_TRUE(Checksums(**held) == expected);
  auto reopened = Snapshot::Open(store, held_generation);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_TRUE(Checksums(**reopened) == expected);
  auto report = VerifyStore(store);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << report->problems.front();
  EXPECT_GE(generations_seen.size(), 2u);
  std::cout << kWriterGenerations << " commits by another process: " << held_reads.load()
            << " reads of the held snapshot, " << opens << " snapshots opened, "
            << generations_seen.size() << " generations seen\n";
}

}  // namespace
}  // namespace cohort::store
