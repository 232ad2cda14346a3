// store_bench: what the store costs next to the obvious alternatives, measured side by side.
//
//  1. Appending k = 1,000 Fashion-MNIST-shaped samples (uint8 28x28, int64 class label) and
//     committing, to stores of n = 10^4, 10^5, 10^6 rows, next to what a user who keeps one
//     memmap'd .npy must do to grow it: rewrite the whole (n+k, 28, 28) array plus the
//     labels and fsync them. The store writes O(k) bytes plus the rows index (8 bytes/row).
//  2. Gathering shuffled batches of 256 rows into a caller buffer with Table::GatherFeatures,
//     next to memcpy of the same number of contiguous bytes from the same kind of mapping,
//     for uint8 (28, 28) and float32 (784,) rows, from a one-segment table and from a table
//     whose rows come from many segments after a split and several moves.
//
// Synthetic random data, no network. Timings are printed, never asserted.
//
//   store_bench [--quick] [--dir PATH] [--keep]
//     --quick     tiny sizes and few repetitions (a smoke test of a few seconds)
//     --dir PATH  scratch space: a fresh store_bench.XXXXXX directory is made under PATH
//                 (default: under $TMPDIR or /tmp) and removed at the end
//     --keep      keep the scratch directory

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/host_array.h"
#include "store/npy.h"
#include "store/snapshot.h"
#include "store/store.h"
#include "store/transaction.h"

namespace {

using cohort::Result;
using cohort::Status;
using cohort::store::Dtype;
using cohort::store::HostArray;
using cohort::store::LabelKind;
using cohort::store::Snapshot;
using cohort::store::Table;
using cohort::store::TableSchema;
using cohort::store::Transaction;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "store_bench: error: %s\n", what.c_str());
  std::exit(1);
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

template <typename T>
T Unwrap(Result<T> r, const char* what) {
  if (!r.ok()) Die(std::string(what) + ": " + r.status().ToString());
  return std::move(r).value();
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Fast synthetic bytes (splitmix64); the content does not matter, only that it is not zero.
void FillRandom(std::byte* p, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(p + i, &z, 8);
  }
  for (; i < n; i++) p[i] = static_cast<std::byte>(i * 131 + seed);
}

TableSchema MnistSchema() {
  TableSchema s;
  s.feature_dtype = Dtype::kUint8;
  s.feature_shape = {28, 28};
  s.label_kind = LabelKind::kClass;
  return s;
}

TableSchema FloatSchema() {
  TableSchema s;
  s.feature_dtype = Dtype::kFloat32;
  s.feature_shape = {784};
  s.label_kind = LabelKind::kClass;
  return s;
}

// n rows of random features in the schema's dtype (float32: values in [0, 1)) and labels 0..9.
void MakeSamples(const TableSchema& schema, uint64_t n, uint64_t seed, HostArray* x, HostArray* y) {
  std::vector<uint64_t> shape{n};
  shape.insert(shape.end(), schema.feature_shape.begin(), schema.feature_shape.end());
  *x = HostArray(schema.feature_dtype, shape);
  FillRandom(x->data.data(), x->data.size(), seed);
  if (schema.feature_dtype == Dtype::kFloat32) {
    auto* f = x->as<float>();
    const auto* u = x->as<uint32_t>();
    for (uint64_t i = 0; i < x->num_elements(); i++) {
      f[i] = static_cast<float>(u[i] >> 8) * (1.0f / 16777216.0f);
    }
  }
  *y = HostArray(Dtype::kInt64, {n});
  for (uint64_t i = 0; i < n; i++) y->as<int64_t>()[i] = static_cast<int64_t>((i * 7 + seed) % 10);
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) total += e.file_size();
  }
  return total;
}

// ---------------------------------------------------------------------------------------------
// 1. Append cost vs store size.

// Writes `header` then `n` bytes to a new file and fsyncs it (the seed's way to grow an array).
void WriteAndSync(const std::string& path, const std::string& header, const std::byte* data,
                  size_t n) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Die("create " + path + ": " + std::strerror(errno));
  auto write_all = [&](const void* p, size_t len) {
    const auto* b = static_cast<const char*>(p);
    while (len > 0) {
      ssize_t w = ::write(fd, b, len);
      if (w < 0) {
        if (errno == EINTR) continue;
        Die("write " + path + ": " + std::strerror(errno));
      }
      b += w;
      len -= static_cast<size_t>(w);
    }
  };
  write_all(header.data(), header.size());
  write_all(data, n);
  if (::fsync(fd) != 0) Die("fsync " + path + ": " + std::strerror(errno));
  ::close(fd);
}

struct AppendRow {
  uint64_t n = 0;
  double begin_ms = 0, append_ms = 0, commit_ms = 0, store_ms = 0;
  double store_mb = 0;
  double rewrite_ms = 0, rewrite_mb = 0;
};

AppendRow BenchAppend(const std::string& scratch, uint64_t n, uint64_t k, int reps) {
  const TableSchema schema = MnistSchema();
  const std::string dir = scratch + "/append-" + std::to_string(n);
  AppendRow row;
  row.n = n;

  // The grown array the rewrite baseline writes: n existing rows followed by k new ones.
  HostArray all_x, all_y;
  MakeSamples(schema, n + k, n, &all_x, &all_y);

  // Build the store of n rows with one Append (the first n rows of the array).
  Check(cohort::store::InitStore(dir), "init store");
  {
    HostArray x(Dtype::kUint8, {n, 28, 28}), y(Dtype::kInt64, {n});
    std::memcpy(x.data.data(), all_x.data.data(), x.data.size());
    std::memcpy(y.data.data(), all_y.data.data(), y.data.size());
    auto txn = Unwrap(Transaction::Begin(dir), "begin");
    Check(txn->CreateTable("train", schema), "create table");
    Unwrap(txn->Append("train", x, &y), "append initial rows");
    Unwrap(txn->Commit("initial " + std::to_string(n) + " rows"), "commit");
  }
  HostArray new_x(Dtype::kUint8, {k, 28, 28}), new_y(Dtype::kInt64, {k});
  std::memcpy(new_x.data.data(), all_x.data.data() + n * 784, new_x.data.size());
  std::memcpy(new_y.data.data(), all_y.data.data() + n * 8, new_y.data.size());

  std::vector<double> begin_ms, append_ms, commit_ms, total_ms, written;
  for (int r = 0; r < reps; r++) {
    const uint64_t before = DirBytes(dir);
    auto t0 = Clock::now();
    auto txn = Unwrap(Transaction::Begin(dir), "begin");
    auto t1 = Clock::now();
    Unwrap(txn->Append("train", new_x, &new_y), "append");
    auto t2 = Clock::now();
    Unwrap(txn->Commit("append " + std::to_string(k)), "commit");
    auto t3 = Clock::now();
    txn.reset();
    auto t4 = Clock::now();
    begin_ms.push_back(Ms(t1 - t0));
    append_ms.push_back(Ms(t2 - t1));
    commit_ms.push_back(Ms(t3 - t2));
    total_ms.push_back(Ms(t4 - t0));
    written.push_back(static_cast<double>(DirBytes(dir) - before));
  }
  row.begin_ms = Median(begin_ms);
  row.append_ms = Median(append_ms);
  row.commit_ms = Median(commit_ms);
  row.store_ms = Median(total_ms);
  row.store_mb = Median(written) / 1e6;

  // The seed's in-place approach: the whole grown array and its labels, written and fsync'd.
  const uint64_t x_shape[] = {n + k, 28, 28};
  const uint64_t y_shape[] = {n + k};
  const std::string x_header = cohort::store::EncodeNpyHeader(Dtype::kUint8, x_shape);
  const std::string y_header = cohort::store::EncodeNpyHeader(Dtype::kInt64, y_shape);
  std::vector<double> rewrite_ms;
  for (int r = 0; r < reps; r++) {
    const std::string xp = scratch + "/rewrite-x-" + std::to_string(r) + ".npy";
    const std::string yp = scratch + "/rewrite-y-" + std::to_string(r) + ".npy";
    auto t0 = Clock::now();
    WriteAndSync(xp, x_header, all_x.data.data(), all_x.data.size());
    WriteAndSync(yp, y_header, all_y.data.data(), all_y.data.size());
    auto t1 = Clock::now();
    rewrite_ms.push_back(Ms(t1 - t0));
    row.rewrite_mb = static_cast<double>(fs::file_size(xp) + fs::file_size(yp)) / 1e6;
    fs::remove(xp);
    fs::remove(yp);
  }
  row.rewrite_ms = Median(rewrite_ms);
  fs::remove_all(dir);
  return row;
}

// ---------------------------------------------------------------------------------------------
// 2. Batch gather.

volatile uint64_t g_sink = 0;

// Builds `name` in a fresh store at `dir` with `rows` rows; with `split`, the table is made of
// six appends, a split that moves a random sixth of it to another table, and ten moves back
// (an active-learning history), so its rows come from many segments in a mixed order.
std::shared_ptr<const Snapshot> BuildGatherStore(const std::string& dir, const TableSchema& schema,
                                                 uint64_t rows, bool split) {
  Check(cohort::store::InitStore(dir), "init store");
  auto txn = Unwrap(Transaction::Begin(dir), "begin");
  Check(txn->CreateTable("train", schema), "create table");
  const int appends = split ? 6 : 1;
  for (int a = 0; a < appends; a++) {
    const uint64_t part = rows / appends + (a == appends - 1 ? rows % appends : 0);
    HostArray x, y;
    MakeSamples(schema, part, 100 + a, &x, &y);
    Unwrap(txn->Append("train", x, &y), "append");
  }
  if (split) {
    std::mt19937_64 rng(42);
    auto ids = Unwrap(txn->TableIds("train"), "table ids");
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(rows / 6);
    Check(txn->Move("train", "pool", ids), "split train -> pool");
    const uint64_t round = std::max<uint64_t>(1, ids.size() / 10);
    for (int r = 0; r < 10; r++) {
      auto pool = Unwrap(txn->TableIds("pool"), "table ids");
      std::shuffle(pool.begin(), pool.end(), rng);
      pool.resize(std::min<uint64_t>(r == 9 ? pool.size() : round, pool.size()));
      if (pool.empty()) break;
      Check(txn->Move("pool", "train", pool), "move pool -> train");
    }
  }
  Unwrap(txn->Commit("gather bench"), "commit");
  txn.reset();
  return Unwrap(Snapshot::Open(dir), "open snapshot");
}

struct GatherRow {
  std::string label;
  uint64_t rows = 0;
  size_t segments = 0;
  size_t row_bytes = 0;
  double gather_gbs = 0, memcpy_gbs = 0, naive_gbs = 0;
};

// Shuffled batches of `batch` rows: `epochs` passes over a permutation of the table.
double TimeGather(const Table& t, const std::vector<uint64_t>& perm, uint64_t batch, int epochs,
                  std::byte* dst) {
  const uint64_t batches = perm.size() / batch;
  auto t0 = Clock::now();
  for (int e = 0; e < epochs; e++) {
    for (uint64_t b = 0; b < batches; b++) {
      Check(t.GatherFeatures(std::span<const uint64_t>(perm.data() + b * batch, batch), dst),
            "gather");
      g_sink = g_sink + static_cast<uint64_t>(dst[(b * 977) % batch]);
    }
  }
  auto t1 = Clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

// Reference, not the store's code: the naive gather, one memcpy per row over
// Table::features() with nothing fetched ahead. Beside GatherFeatures it shows what the
// store's prefetching is worth on the same mapping.
void NaiveGatherBatch(const Table& t, const uint64_t* rows, uint64_t batch, std::byte* dst) {
  const size_t rb = t.schema().feature_row_bytes();
  for (uint64_t i = 0; i < batch; i++) std::memcpy(dst + i * rb, t.features(rows[i]), rb);
}

double TimeNaiveGather(const Table& t, const std::vector<uint64_t>& perm, uint64_t batch,
                       int epochs, std::byte* dst) {
  const uint64_t batches = perm.size() / batch;
  auto t0 = Clock::now();
  for (int e = 0; e < epochs; e++) {
    for (uint64_t b = 0; b < batches; b++) {
      NaiveGatherBatch(t, perm.data() + b * batch, batch, dst);
      g_sink = g_sink + static_cast<uint64_t>(dst[(b * 977) % batch]);
    }
  }
  auto t1 = Clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

// memcpy of the same number of bytes per batch from contiguous rows of `src` (the mapped
// features of a one-segment table), walking through the whole table as the gathers do.
double TimeMemcpy(const std::byte* src, uint64_t rows, size_t row_bytes, uint64_t batch, int epochs,
                  std::byte* dst) {
  const uint64_t batches = rows / batch;
  const size_t bytes = batch * row_bytes;
  auto t0 = Clock::now();
  for (int e = 0; e < epochs; e++) {
    for (uint64_t b = 0; b < batches; b++) {
      std::memcpy(dst, src + b * bytes, bytes);
      g_sink = g_sink + static_cast<uint64_t>(dst[(b * 977) % batch]);
    }
  }
  auto t1 = Clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

void VerifyGather(const Table& t, const std::vector<uint64_t>& perm, uint64_t batch,
                  std::byte* dst) {
  const size_t rb = t.schema().feature_row_bytes();
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 0) {
      Check(t.GatherFeatures(std::span<const uint64_t>(perm.data(), batch), dst), "gather");
    } else {
      NaiveGatherBatch(t, perm.data(), batch, dst);
    }
    for (uint64_t i = 0; i < batch; i++) {
      if (std::memcmp(dst + i * rb, t.features(perm[i]), rb) != 0) {
        Die("table " + t.name() + ": gathered row " + std::to_string(perm[i]) + " differs");
      }
    }
  }
}

std::vector<GatherRow> BenchGather(const std::string& scratch, const std::string& label,
                                   const TableSchema& schema, uint64_t rows, int runs,
                                   double bytes_per_run) {
  const uint64_t batch = 256;
  auto one = BuildGatherStore(scratch + "/gather-" + label + "-1", schema, rows, false);
  auto many = BuildGatherStore(scratch + "/gather-" + label + "-n", schema, rows, true);
  const Table* t1 = Unwrap(one->table("train"), "table");
  const Table* tn = Unwrap(many->table("train"), "table");
  if (t1->size() != rows || tn->size() != rows) Die("gather tables have the wrong size");
  const size_t rb = schema.feature_row_bytes();

  std::mt19937_64 rng(7);
  std::vector<uint64_t> perm(rows);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::byte> dst(batch * rb);

  // Warm the page cache and the page tables: one full pass over both tables and the source.
  TimeGather(*t1, perm, batch, 1, dst.data());
  TimeGather(*tn, perm, batch, 1, dst.data());
  TimeMemcpy(t1->features(0), rows, rb, batch, 1, dst.data());
  VerifyGather(*t1, perm, batch, dst.data());
  VerifyGather(*tn, perm, batch, dst.data());

  const double epoch_bytes = static_cast<double>((rows / batch) * batch * rb);
  const int epochs = std::max(1, static_cast<int>(bytes_per_run / epoch_bytes));
  std::vector<double> g1, gn, mc, p1, pn;
  for (int r = 0; r < runs; r++) {
    std::shuffle(perm.begin(), perm.end(), rng);  // a new epoch order each run
    mc.push_back(epoch_bytes * epochs /
                 TimeMemcpy(t1->features(0), rows, rb, batch, epochs, dst.data()) / 1e9);
    g1.push_back(epoch_bytes * epochs / TimeGather(*t1, perm, batch, epochs, dst.data()) / 1e9);
    gn.push_back(epoch_bytes * epochs / TimeGather(*tn, perm, batch, epochs, dst.data()) / 1e9);
    p1.push_back(epoch_bytes * epochs / TimeNaiveGather(*t1, perm, batch, epochs, dst.data()) /
                 1e9);
    pn.push_back(epoch_bytes * epochs / TimeNaiveGather(*tn, perm, batch, epochs, dst.data()) /
                 1e9);
  }
  const double memcpy_gbs = Median(mc);
  std::vector<GatherRow> out(2);
  out[0] = {label, rows, t1->entry().segments.size(), rb, Median(g1), memcpy_gbs, Median(p1)};
  out[1] = {label, rows, tn->entry().segments.size(), rb, Median(gn), memcpy_gbs, Median(pn)};
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  bool keep = false;
  std::string parent;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--keep") {
      keep = true;
    } else if (a == "--dir" && i + 1 < argc) {
      parent = argv[++i];
    } else if (a.rfind("--dir=", 0) == 0) {
      parent = a.substr(6);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--dir PATH] [--keep]\n", argv[0]);
      return 2;
    }
  }
  if (parent.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    parent = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  std::error_code ec;
  fs::create_directories(parent, ec);
  std::string templ = parent + "/store_bench.XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr)
    Die("mkdtemp under " + parent + ": " + std::strerror(errno));
  const std::string scratch = templ;

  const std::vector<uint64_t> sizes =
      quick ? std::vector<uint64_t>{1000, 10000} : std::vector<uint64_t>{10000, 100000, 1000000};
  const uint64_t k = 1000;
  const int reps = quick ? 2 : 5;
  const uint64_t gather_rows = quick ? 6000 : 60000;
  const int gather_runs = quick ? 3 : 11;
  const double bytes_per_run = quick ? 16e6 : 256e6;

  std::printf("store_bench%s: scratch %s\n\n", quick ? " --quick" : "", scratch.c_str());
  std::printf(
      "Append k=%llu samples (uint8 28x28 + int64 label) and commit, vs rewriting the grown\n"
      "(n+k, 28, 28) array + labels and fsync'ing them; median of %d, ms\n",
      static_cast<unsigned long long>(k), reps);
  std::printf("%9s %9s %7s %7s %7s %9s %11s %10s %13s\n", "n", "store_ms", "begin", "append",
              "commit", "store_MB", "rewrite_ms", "rewrite_MB", "rewrite/store");
  std::fflush(stdout);
  for (uint64_t n : sizes) {
    AppendRow r = BenchAppend(scratch, n, k, reps);
    std::printf("%9llu %9.2f %7.2f %7.2f %7.2f %9.3f %11.1f %10.1f %12.1fx\n",
                static_cast<unsigned long long>(r.n), r.store_ms, r.begin_ms, r.append_ms,
                r.commit_ms, r.store_mb, r.rewrite_ms, r.rewrite_mb, r.rewrite_ms / r.store_ms);
    std::fflush(stdout);
  }

  std::printf(
      "\nShuffled batches of 256 rows via Table::GatherFeatures into a caller buffer, vs memcpy\n"
      "of 256 contiguous rows (same bytes) from a one-segment table's mapping; median of %d runs.\n"
      "naive: one memcpy per row over Table::features(), no prefetching (reference, not store "
      "code)\n",
      gather_runs);
  std::printf("%-14s %7s %8s %9s %11s %11s %8s %11s %11s\n", "features", "rows", "segments",
              "row_bytes", "gather_GB/s", "memcpy_GB/s", "ratio", "naive_GB/s", "naive_ratio");
  std::fflush(stdout);
  const std::pair<std::string, TableSchema> kinds[] = {{"uint8_28x28", MnistSchema()},
                                                       {"float32_784", FloatSchema()}};
  for (const auto& [label, schema] : kinds) {
    for (const GatherRow& r :
         BenchGather(scratch, label, schema, gather_rows, gather_runs, bytes_per_run)) {
      std::printf("%-14s %7llu %8zu %9zu %11.2f %11.2f %8.2f %11.2f %11.2f\n", r.label.c_str(),
                  static_cast<unsigned long long>(r.rows), r.segments, r.row_bytes, r.gather_gbs,
                  r.memcpy_gbs, r.gather_gbs / r.memcpy_gbs, r.naive_gbs,
                  r.naive_gbs / r.memcpy_gbs);
      std::fflush(stdout);
    }
  }

  if (keep) {
    std::printf("\nkept %s\n", scratch.c_str());
  } else {
    fs::remove_all(scratch, ec);
  }
  return 0;
}
