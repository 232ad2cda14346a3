#include "loop/precision_note.h"

#include <fmt/format.h>

#include <algorithm>

namespace cohort::loop {

bool CpuHasBf16Kernels() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

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
