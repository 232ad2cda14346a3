// A member's stdout as the controller reads it: ParseEventLine (launch/subprocess.h) turns a
// line into an event or log, then what the scheduler does with an event (loop/worker_client.h:
// its kind, protocol check, progress, epochs and journal metrics; common/json_text.h: the
// one-line rendering in messages), as OnWorkerEvent / OnScriptEvent do.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "common/json_text.h"
#include "fuzz/fuzz_util.h"
#include "launch/subprocess.h"
#include "loop/schedule/worker_client.h"

using namespace cohort;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto event = launch::ParseEventLine(fuzz::AsText(data, size));
  if (!event) return 0;
  if (!event->is_object()) __builtin_trap();
  (void)loop::KindOf(*event);
  (void)loop::SpeaksOurProtocol(*event);
  (void)loop::ProgressOf(*event);
  (void)loop::EpochsOf(*event);
  (void)JsonForMessage(*event);
  (void)JsonStringField(*event, "message");
  (void)JsonNumberField(*event, "seconds");
  (void)loop::AttemptMetrics(*event, /*script=*/false, 1.0, 2.0).dump();
  (void)loop::AttemptMetrics(*event, /*script=*/true, 1.0, 2.0).dump();
  return 0;
}
