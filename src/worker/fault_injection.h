// Fault injection for the end-to-end fault matrix (tests/fault_matrix_test.py): a worker made
// to fail once, in a chosen way, when a chosen command arrives, so the tests can hit the train
// and the predict phase exactly instead of hoping a signal sent from outside lands there.
//
// Off unless COHORT_TEST_FAULT is set to "OP:KIND" (OP: train or predict; KIND: kill, segv,
// exit, hang, close_stdout, garbage) and COHORT_TEST_FAULT_ONCE names a file: the first worker
// that gets an OP command and manages to create that file (O_EXCL) misbehaves; every other
// command of every worker runs normally. docs/development.md lists the kinds.
//
// Thread-safety: called from the worker's command thread only.
#pragma once

#include <functional>
#include <string>

namespace cohort::worker {

// Misbehaves as COHORT_TEST_FAULT says if `op` is its OP and this is the run's one fault;
// returns normally otherwise (and after `garbage`, which only prints through `print`).
// `close_events` closes the worker's event channel (its stdout to the controller).
void MaybeInjectFault(const std::string& op, const std::function<void(const std::string&)>& print,
                      const std::function<void()>& close_events);

}  // namespace cohort::worker
