// What `cohort run` says at start about bf16 on a CPU that cannot run it fast.
//
// A member computes in bfloat16 when its `precision` or its `pool_precision` is "bf16". On the
// CPU that goes through oneDNN's bf16 kernels, which need AVX-512 (BW, VL and DQ); without
// them libtorch emulates bf16, correctly but far slower than fp32: a pool pass of the example's
// `cnn-32-elu` took 73.5 s in bf16 against 5.1 s in fp32 on an AVX2 machine (docs/models.md,
// "Precision"). The worker falls back silently (model/onednn_forward.h), so the controller names
// the members once, at start, before hours go into a slow run. Only for a local launcher: Slurm
// workers run on nodes whose CPU the controller's host does not tell.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>

#include "loop/config/config.h"

namespace cohort::loop {

// Whether this machine's CPU has the instructions oneDNN's bf16 kernels need.
bool CpuHasBf16Kernels();

// The warning for `config` (without "warning: "), or nullopt: no native member computes in bf16
// on a CPU device, the launcher is not local, or `cpu_has_bf16_kernels`.
std::optional<std::string> EmulatedBf16Note(const LoopConfig& config, bool cpu_has_bf16_kernels);

}  // namespace cohort::loop
