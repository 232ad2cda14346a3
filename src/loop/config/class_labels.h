// The run's class count, and the checks that keep every class label the loop trains on,
// scores with or commits inside it.
//
// Every member of a run predicts the same classes: the count the members' `classes` give (they
// must agree), else the width of the native members' final `dense` (they must agree), else
// one more than the largest stored label of the tables the run reads (train,
// test, and the pool when `hidden_labels` reveals its labels). Native members without their own
// `classes` are told this count, outside members read it from COHORT_CLASSES, and a member's
// prediction files with another width fail its attempt. Labels a round would bring in (an
// oracle's answer) are checked against it before anything is committed, so a label the members
// cannot train on never enters the store.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "loop/config/config.h"
#include "store/snapshot.h"

namespace cohort::loop {

// Above this, a class count inferred from the labels is taken for a mistake (a label of 2^40
// would make a last layer of 2^40 outputs); members that really have more say so with `classes`.
inline constexpr int64_t kMaxInferredClasses = 100000;

// A class table's labels, one int64 per row.
std::vector<int64_t> ClassLabelsOf(const store::Table& table);

// A regression table's float32 targets, row after row (rows * components values).
std::vector<float> TargetsOf(const store::Table& table);

// The run's class count at `snap` (see above). InvalidArgument naming the config lines of
// members whose `classes` differ, or the table and sample ids of labels outside the count.
Result<int64_t> RunClassCount(const LoopConfig& config, const store::Snapshot& snap);

// OK when every label lies in [0, classes); else InvalidArgument: "`what`: N label(s) outside
// [0, classes) at sample id I (label L), ...", naming the first few, then `hint` if any.
Status CheckClassLabels(const std::string& what, std::span<const int64_t> labels,
                        std::span<const uint64_t> ids, int64_t classes,
                        const std::string& hint = "");

}  // namespace cohort::loop
