// The worker process (`cohort worker`): one per device, persistent across rounds.
//
// It reads newline-delimited JSON commands on stdin (train, predict, evaluate, shutdown) and
// writes one `@cohort {json}` event line per event on its real stdout (hello, progress,
// heartbeat, done, predictions, error), each flushed. At start it moves its stdout aside so
// that anything a library prints goes to stderr, the member's log. Every command names the
// store and the generation to map; the worker opens exactly that snapshot for the command
// and releases it afterwards. A malformed or unknown command gets an error event and the
// worker keeps serving; when stdin closes it cancels what it is doing and exits 0.
// docs/protocol.md is the normative description.
//
// Thread-safety: RunWorker owns the process's stdin and stdout; call it once, from main.
#pragma once

#include <string>

namespace cohort::worker {

struct WorkerOptions {
  std::string device = "cpu";  // default for commands that do not name one
  int threads = 1;             // default intra-op threads on CPU
  double heartbeat_interval_s = 2.0;
  double progress_interval_s = 0.5;  // at most this often per running command
  // Non-empty: the log (fd 2) is appended to this file instead of the inherited stderr. Under
  // Slurm the step's stderr would travel through srun beside the events, and each log line
  // then holds up the next event by TCP's delayed acknowledgement (about 40 ms).
  std::string log_file;
};

// Serves commands until stdin closes or a shutdown command; returns the exit status.
int RunWorker(const WorkerOptions& options);

}  // namespace cohort::worker
