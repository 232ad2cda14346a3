// For the loop's unit tests: a small three-table source store and loop.toml texts over it.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "store/store.h"
#include "store/test_util.h"
#include "store/transaction.h"

namespace cohort::loop::testing {

// A store with tables train, pool and test: uint8 features (2, 3), class labels i % classes.
inline void MakeSourceStore(const std::string& dir, uint64_t train, uint64_t pool, uint64_t test,
                            int64_t classes = 3) {
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(store::InitStore(dir).ok());
  auto txn = store::Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok()) << txn.status().ToString();
  store::TableSchema schema;
  schema.feature_dtype = store::Dtype::kUint8;
  schema.feature_shape = {2, 3};
  schema.label_kind = store::LabelKind::kClass;
  uint8_t first = 0;
  for (auto [table, rows] : {std::pair{"train", train}, {"pool", pool}, {"test", test}}) {
    ASSERT_TRUE((*txn)->CreateTable(table, schema).ok());
    if (rows == 0) continue;
    store::HostArray labels(store::Dtype::kInt64, {rows});
    for (uint64_t i = 0; i < rows; ++i) {
      labels.as<int64_t>()[i] = static_cast<int64_t>(i) % classes;
    }
    auto added = (*txn)->Append(table, store::testing::Uint8Features(rows, first), &labels);
    ASSERT_TRUE(added.ok()) << added.status().ToString();
    first = static_cast<uint8_t>(first + rows);
  }
  auto committed = (*txn)->Commit("tables");
  ASSERT_TRUE(committed.ok()) << committed.status().ToString();
}

// A loop.toml for `members` native members on `devices` CPU devices; `extra` is appended
// (more tables: [stop], [failure], ...). Acquisition: entropy, 2 per round;
// stop after 3 rounds unless `extra` has a [stop] table.
inline std::string LoopConfigText(const std::string& source, int members, int devices,
                                  const std::string& extra) {
  std::string text = "name = \"t\"\ndevices = [";
  for (int d = 0; d < devices; ++d) text += (d ? ", " : "") + ("\"cpu:" + std::to_string(d) + "\"");
  text += "]\n[store]\nsource = \"" + source + "\"\n";
  for (int m = 0; m < members; ++m) {
    text += "[[member]]\nname = \"m" + std::to_string(m) + "\"\nmodel = \"flatten, dense 3\"\n";
  }
  text += "[acquisition]\nstrategy = \"entropy\"\nbatch_size = 2\n";
  if (extra.find("[stop]") == std::string::npos) text += "[stop]\nmax_rounds = 3\n";
  return text + extra;
}

}  // namespace cohort::loop::testing
