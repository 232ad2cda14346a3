#include "model/dropout.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <mutex>

namespace cohort::model {

namespace {

// splitmix64's output function: a bijective mix of the counter, good to all 64 bits.
inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t NextSeed() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get<at::CPUGeneratorImpl>()->random64();
}

}  // namespace

torch::Tensor DropoutMask(int64_t numel, double rate, uint64_t seed) {
  torch::Tensor mask = torch::empty({numel}, torch::kFloat);
  if (rate >= 1) return mask.zero_();
  const float scale = static_cast<float>(1.0 / (1.0 - rate));
  // Keep when a uniform 32-bit draw falls below (1 - rate) * 2^32.
  const auto threshold = static_cast<uint64_t>(std::llround((1.0 - rate) * 4294967296.0));
  float* out = mask.data_ptr<float>();
  const uint64_t key = Mix(seed);
  const int64_t pairs = (numel + 1) / 2;
  at::parallel_for(0, pairs, 16384, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; j++) {
      // splitmix64's stream: the j-th output is Mix(seed + (j + 1) * gamma).
      const uint64_t r = Mix(key + static_cast<uint64_t>(j + 1) * 0x9e3779b97f4a7c15ULL);
      const int64_t i = 2 * j;
      out[i] = (r & 0xffffffffULL) < threshold ? scale : 0.0f;
      if (i + 1 < numel) out[i + 1] = (r >> 32) < threshold ? scale : 0.0f;
    }
  });
  return mask;
}

torch::Tensor DropoutImpl::forward(const torch::Tensor& x) {
  if (!is_training() || rate_ <= 0) return x;
  if (!x.device().is_cpu() || !x.is_floating_point()) return torch::dropout(x, rate_, true);
  torch::Tensor mask = DropoutMask(x.numel(), rate_, NextSeed()).view(x.sizes());
  if (x.scalar_type() != torch::kFloat) mask = mask.to(x.scalar_type());
  return x * mask;  // autograd's backward: the gradient times the same mask
}

}  // namespace cohort::model
