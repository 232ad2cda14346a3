// The worker's command lines (src/worker/command.h): ParseCommandLine on an arbitrary line,
// then the fields each op reads (store, generation, device, and a train command's config,
// through TrainConfigFromJson), as RunWorker reads them before it opens a store.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "model/config_json.h"
#include "model/train_config.h"
#include "worker/command.h"

using namespace cohort;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  worker::ParsedCommand p = worker::ParseCommandLine(fuzz::AsText(data, size));
  if (!p.error.empty()) return 0;
  if (!p.command.is_object()) __builtin_trap();
  (void)p.id.dump();
  worker::CommandFields f(p.command, p.op);
  for (const char* key : {"member", "table", "checkpoint", "out", "store"}) (void)f.String(key);
  (void)f.Generation();
  (void)f.Device(model::DeviceConfig{});
  auto it = p.command.find("config");
  if (it != p.command.end()) {
    auto config = model::TrainConfigFromJson(*it, model::TrainConfig{}, "m");
    if (config.ok()) (void)model::TrainConfigToJson(*config).dump();
  }
  return 0;
}
