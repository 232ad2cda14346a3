// CpuHasAvx512F and friends: the x86 instruction-set extensions of the CPU this process runs on,
// for the code paths that are chosen by what the CPU can execute (oneDNN's dense layers, the
// byte-conversion loops, bf16). One place for the architecture check: on a CPU other than x86
// every answer is false.
//
// Thread-safety: pure functions (the compiler's cpu-feature table is initialised before main).
#pragma once

namespace cohort {

bool CpuHasAvx512F();
bool CpuHasAvx512BW();
bool CpuHasAvx512VL();
bool CpuHasAvx512DQ();

}  // namespace cohort
