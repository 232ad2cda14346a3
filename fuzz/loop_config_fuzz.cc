// loop.toml: ParseLoopConfig on arbitrary text, then what the controller does with a config
// it accepted (its JSON for the journal, its fingerprint, a resume check against itself).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "loop/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(cohort::fuzz::AsText(data, size));
  auto config = cohort::loop::ParseLoopConfig(text, "/fuzz/loop.toml", "/fuzz");
  if (!config.ok()) {
    if (config.status().message().empty()) __builtin_trap();  // every refusal says why
    return 0;
  }
  (void)cohort::loop::LoopConfigToJson(*config).dump();
  (void)cohort::loop::LoopConfigFingerprint(*config);
  if (!cohort::loop::DiffLoopConfigs(*config, *config).empty()) __builtin_trap();
  if (!cohort::loop::CheckResumeCompatible(*config, *config).ok()) __builtin_trap();
  return 0;
}
