// The checks of a loop config that need its store: the tables exist with the kinds the loop
// needs (train and test labels of one kind, the same features everywhere, stored labels in the
// pool for hidden_labels), the train table is not empty, the strategy and stop target are of
// the run's kind, and every native member's model fits the train table's shapes. Run before
// any worker starts, so a bad config costs nothing.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include "common/status.h"
#include "loop/config/config.h"
#include "store/snapshot.h"

namespace cohort::loop {

// Errors are one line naming the config file, line and field ("loop.toml:23: member[2].model:
// ...") or the store and table at fault.
Status CheckConfigAgainstStore(const LoopConfig& config, const store::Snapshot& snap);

}  // namespace cohort::loop
