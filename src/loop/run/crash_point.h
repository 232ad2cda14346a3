// Crash points: named places where the controller can be made to die with SIGKILL, so the
// end-to-end tests can kill it exactly inside the windows that matter for resume (between a
// store commit and its journal record, between two steps of the commit itself) instead of
// hoping a random kill lands there.
//
// Off unless the environment variable COHORT_CRASH_AT is set, to "NAME" (die at the first
// pass through crash point NAME) or "NAME:N" (at the Nth). The points are listed in
// docs/development.md. `store` counts every mutating file operation of the run's store
// (through CrashEnv()), so "store:3" dies in the middle of a commit.
//
// Thread-safety: MaybeCrash may be called from any thread.
#pragma once

#include "store/env.h"

namespace cohort::loop {

// Raises SIGKILL if COHORT_CRASH_AT names this pass through `point`.
void MaybeCrash(const char* point);

// Env::Default(), or when COHORT_CRASH_AT names `store`, a wrapper that calls
// MaybeCrash("store") before every mutating operation.
store::Env* CrashEnv();

}  // namespace cohort::loop
