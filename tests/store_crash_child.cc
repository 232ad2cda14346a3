// store_crash_child: a writer process for the store's crash and concurrency tests.
//
// Usage: store_crash_child [--no-sync] STORE START_GEN COUNT
//
// Opens the store at STORE, which must be at generation START_GEN, and commits COUNT
// generations one after the other, one transaction each, printing "committed G\n" to stdout
// (flushed) once generation G is committed. What a generation holds is a function of the
// generation before it and its own number alone, so two stores that start out equal stay
// equal generation by generation: store_crash_test kills this process at random moments and
// compares what survived with a reference store built by uninterrupted runs, and
// store_concurrent_test reads a store while this process writes it.
//
// The commit that makes generation g: every 5th generation, a compaction of the tables that
// are more than 20% dead, as a commit of its own (if no table is, the ordinary changes
// instead). Otherwise: creates tables "pool" and "train" (uint8 features (8, 8), class labels)
// if missing; appends kAppendRows rows to pool whose bytes and labels are a function of g;
// removes pool's rows at positions p with (p + g) % 6 == 0; moves kMoveRows rows of pool,
// from a position that depends on g, to train; and removes train's rows at positions p with
// (p + g) % 10 == 0.
//
// --no-sync writes through a FaultInjectionEnv that skips fsync: the same bytes, much sooner,
// for building reference stores; durability is not needed there.
//
// Exit status: 0 after COUNT commits, 1 on a store error (message on stderr), 2 on bad usage.
// Thread-safety: a single-threaded program.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/env.h"
#include "store/fault_env.h"
#include "store/host_array.h"
#include "store/schema.h"
#include "store/transaction.h"

namespace cohort::store {
namespace {

constexpr uint64_t kAppendRows = 300;
constexpr uint64_t kMoveRows = 40;
constexpr uint64_t kFeatureSide = 8;
constexpr uint64_t kCompactEvery = 5;
constexpr double kCompactThreshold = 0.2;

TableSchema ChildTableSchema() {
  TableSchema schema;
  schema.feature_dtype = Dtype::kUint8;
  schema.feature_shape = {kFeatureSide, kFeatureSide};
  schema.label_kind = LabelKind::kClass;
  return schema;
}

// The ids at the positions of `ids` where (position + generation) % modulus == 0.
std::vector<uint64_t> EveryNth(const std::vector<uint64_t>& ids, uint64_t generation,
                               uint64_t modulus) {
  std::vector<uint64_t> out;
  for (uint64_t p = 0; p < ids.size(); p++) {
    if ((p + generation) % modulus == 0) out.push_back(ids[p]);
  }
  return out;
}

// Applies the changes that make generation `generation` (see the header paragraph).
Status ApplyGeneration(Transaction& txn, uint64_t generation) {
  if (generation % kCompactEvery == 0) {
    COHORT_ASSIGN_OR_RETURN(auto compacted, txn.Compact(kCompactThreshold));
    if (!compacted.empty()) return Status::OK();
  }
  for (const char* table : {"pool", "train"}) {
    if (!txn.HasTable(table)) COHORT_RETURN_IF_ERROR(txn.CreateTable(table, ChildTableSchema()));
  }

  const uint64_t row_bytes = kFeatureSide * kFeatureSide;
  HostArray features(Dtype::kUint8, {kAppendRows, kFeatureSide, kFeatureSide});
  HostArray labels(Dtype::kInt64, {kAppendRows});
  for (uint64_t i = 0; i < kAppendRows; i++) {
    for (uint64_t j = 0; j < row_bytes; j++) {
      features.as<uint8_t>()[i * row_bytes + j] =
          static_cast<uint8_t>((generation * 131 + i * 7 + j * 3) & 0xff);
    }
    labels.as<int64_t>()[i] = static_cast<int64_t>((generation * 7 + i) % 10);
  }
  COHORT_RETURN_IF_ERROR(txn.Append("pool", features, &labels).status());

  COHORT_ASSIGN_OR_RETURN(auto pool_ids, txn.TableIds("pool"));
  COHORT_RETURN_IF_ERROR(txn.Remove("pool", EveryNth(pool_ids, generation, 6)));

  COHORT_ASSIGN_OR_RETURN(pool_ids, txn.TableIds("pool"));
  const uint64_t move_count = std::min<uint64_t>(kMoveRows, pool_ids.size());
  const uint64_t move_from = (generation * 13) % (pool_ids.size() - move_count + 1);
  std::span<const uint64_t> moved(pool_ids.data() + move_from, move_count);
  COHORT_RETURN_IF_ERROR(txn.Move("pool", "train", moved));

  COHORT_ASSIGN_OR_RETURN(auto train_ids, txn.TableIds("train"));
  COHORT_RETURN_IF_ERROR(txn.Remove("train", EveryNth(train_ids, generation, 10)));
  return Status::OK();
}

bool ParseNumber(const char* text, uint64_t* out) {
  const char* end = text + std::strlen(text);
  auto [ptr, ec] = std::from_chars(text, end, *out);
  return ec == std::errc() && ptr == end && ptr != text;
}

int Fail(const Status& status) {
  std::fprintf(stderr, "store_crash_child: %s\n", status.ToString().c_str());
  return 1;
}

int Run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  bool no_sync = false;
  if (!args.empty() && args.front() == "--no-sync") {
    no_sync = true;
    args.erase(args.begin());
  }
  uint64_t start_generation = 0;
  uint64_t count = 0;
  if (args.size() != 3 || !ParseNumber(args[1].c_str(), &start_generation) ||
      !ParseNumber(args[2].c_str(), &count)) {
    std::fprintf(stderr, "usage: store_crash_child [--no-sync] STORE START_GEN COUNT\n");
    return 2;
  }
  const std::string& store = args[0];

  FaultInjectionEnv no_sync_env;
  no_sync_env.set_real_sync(false);
  Env* env = no_sync ? static_cast<Env*>(&no_sync_env) : Env::Default();

  for (uint64_t i = 0; i < count; i++) {
    auto txn = Transaction::Begin(store, env);
    if (!txn.ok()) return Fail(txn.status());
    const uint64_t generation = (*txn)->base_generation() + 1;
    if (i == 0 && (*txn)->base_generation() != start_generation) {
      return Fail(Status::InvalidArgument(store + " is at generation " +
                                          std::to_string((*txn)->base_generation()) +
                                          ", expected " + std::to_string(start_generation)));
    }
    Status applied = ApplyGeneration(**txn, generation);
    if (!applied.ok()) return Fail(applied);
    auto committed = (*txn)->Commit("store_crash_child: generation " + std::to_string(generation));
    if (!committed.ok()) return Fail(committed.status());
    if (*committed != generation) {
      return Fail(Status::Corruption("committed generation " + std::to_string(*committed) +
                                     ", expected " + std::to_string(generation)));
    }
    std::printf("committed %llu\n", static_cast<unsigned long long>(generation));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace cohort::store

int main(int argc, char** argv) { return cohort::store::Run(argc, argv); }
