// OneDnnLinear: a dense layer's forward and backward for fp32 training on the CPU through
// oneDNN's inner product (inside libtorch: mkldnn_linear and its two backward ops) instead of
// the BLAS sgemm (internal to src/model).
//
// Why: oneDNN picks the CPU's widest instructions itself, while OpenBLAS runs whichever kernel
// its core detection or OPENBLAS_CORETYPE gives it. On the 2026-12-06 machine (AVX-512) a
// training step's three products of a 128x6272 batch and a 6272x128 layer took 20.6 ms through
// the sgemm with OpenBLAS's detected SSE3 kernel (30 GFLOPS) and 8.6 ms with its Haswell kernel,
// against 6.0-6.2 ms through oneDNN (docs/models.md). Results match torch::nn::functional::linear
// to float rounding (another summation order), and are the same bits run to run at a fixed thread
// count.
//
// The trainer turns it on for a Network (NetworkImpl::set_onednn_dense) that trains on the CPU
// in fp32 where libtorch has oneDNN, the CPU has AVX-512 (OneDnnLinearPaysOnThisCpu) and
// COHORT_ONEDNN is unset or "auto" ("on": on any CPU; "off": never); the network then uses it for
// float batches outside autocast. bf16 members, other devices and prediction passes (which
// have OneDnnForward) keep the module's own forward.
//
// Thread-safety: pure functions; concurrent calls on different tensors are safe.
#pragma once

#include <torch/torch.h>

namespace cohort::model {

// oneDNN's inner product costs ~0.1 ms a step more than the sgemm whatever the size (its
// format conversions and primitive lookup): for a 16x64 batch through a 64x64 layer, 171 us for
// forward and backward against 17 us. From about 4M multiply-adds (batch x in x out) on it wins:
// 128x256x256 took 0.51 ms against 0.66, 128x784x256 1.38 against 2.05 (python3-torch, one
// thread, OpenBLAS's Haswell kernel, 2026-12-06). Smaller layers keep the sgemm.
inline constexpr int64_t kOneDnnLinearMinMultiplyAdds = int64_t{1} << 22;

// Whether training's dense layers gain from oneDNN on this CPU: where it has AVX-512 (oneDNN then
// runs 512-bit kernels, OpenBLAS the 256-bit AVX2 one the environment pins it to). On an AVX2-only
// CPU both run 256-bit kernels and oneDNN's conversions lose: on the 2026-12-07 machine (AMD EPYC,
// AVX2) two epochs of `cnn-32-elu` on 10,000 rows took 6.81 s through oneDNN against 6.03 s
// through the sgemm, `dense 256 relu, dense 10` 0.50 against 0.41 (medians of 3, interleaved).
// The CPU decides, not a timing taken at start, so a run trains the same bits each time it runs
// on the same machine (a resumed run included).
bool OneDnnLinearPaysOnThisCpu();

// x (B, in) float on the CPU, weight (out, in), bias (out) or undefined: x W^T + b, with the
// gradients of x, weight and bias (those that require one) computed by oneDNN too.
torch::Tensor OneDnnLinear(const torch::Tensor& x, const torch::Tensor& weight,
                           const torch::Tensor& bias);

}  // namespace cohort::model
