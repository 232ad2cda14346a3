#include "common/cpu_features.h"

namespace cohort {

#if defined(__x86_64__) || defined(__i386__)
// __builtin_cpu_supports takes only a string literal, hence one function per feature.
bool CpuHasAvx512F() { return __builtin_cpu_supports("avx512f") != 0; }
bool CpuHasAvx512BW() { return __builtin_cpu_supports("avx512bw") != 0; }
bool CpuHasAvx512VL() { return __builtin_cpu_supports("avx512vl") != 0; }
bool CpuHasAvx512DQ() { return __builtin_cpu_supports("avx512dq") != 0; }
#else
bool CpuHasAvx512F() { return false; }
bool CpuHasAvx512BW() { return false; }
bool CpuHasAvx512VL() { return false; }
bool CpuHasAvx512DQ() { return false; }
#endif

}  // namespace cohort
