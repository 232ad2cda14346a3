#include "loop/config/precision_note.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/cpu_features.h"

namespace cohort::loop {

bool CpuHasBf16Kernels() { return CpuHasAvx512BW() && CpuHasAvx512VL() && CpuHasAvx512DQ(); }

std::optional<std::string> EmulatedBf16Note(const LoopConfig& config, bool cpu_has_bf16_kernels) {
  if (cpu_has_bf16_kernels || config.launcher != Launcher::kLocal) return std::nullopt;
  const bool on_cpu = std::any_of(config.devices.begin(), config.devices.end(),
                                  [](const launch::Device& d) { return !d.is_cuda(); });
  if (!on_cpu) return std::nullopt;
  std::string names;
  int count = 0;
  for (const MemberConfig& m : config.members) {
    if (!m.is_script() && (m.train.precision == "bf16" || m.train.pool_precision == "bf16")) {
      names += (count++ == 0 ? "" : ", ") + m.name;
    }
  }
  if (count == 0) return std::nullopt;
  return fmt::format(
      "{} {} {} in bf16 (precision or pool_precision) on CPU devices, but this CPU lacks the "
      "AVX-512 instructions (BW, VL, DQ) of oneDNN's bf16 kernels: bf16 runs emulated there, "
      "14-42x slower than fp32 in our measurements (docs/models.md, \"Precision\"); fp32 is faster "
      "here",
      count == 1 ? "member" : "members", names, count == 1 ? "computes" : "compute");
}

}  // namespace cohort::loop
