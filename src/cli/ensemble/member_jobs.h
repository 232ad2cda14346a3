// Running `cohort-member` commands from the torch-free `cohort` (`cohort predict RUN_DIR`,
// `cohort export`): each job's stderr goes to its own log, at most `slots` run at once, and a
// job that fails is reported by the last line of its log (its `cohort: error:` message).
//
// Thread-safety: RunMemberJobs uses a launch::SubprocessSet, one per process; call it from
// one thread.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"
#include "launch/subprocess.h"

namespace cohort::cli {

struct MemberJob {
  std::string what;        // names the job in an error: "member mlp-a"
  launch::SpawnSpec spec;  // spec.stderr_path is the job's log
};

// Runs every job, `slots` at a time, in order. After the first failure no new job starts
// (the running ones finish); the error is "WHAT: LAST LOG LINE" (or how the process ended when
// its log is empty).
Status RunMemberJobs(std::vector<MemberJob> jobs, size_t slots);

// The last non-empty line of the file at `path`, without a leading "cohort: error: ";
// empty when there is none.
std::string LastErrorLine(const std::string& path);

}  // namespace cohort::cli
