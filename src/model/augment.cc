#include "model/augment.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/splitmix.h"

namespace cohort::model {

namespace {

// A sample's stream of random numbers.
class SampleRandom {
 public:
  SampleRandom(uint64_t pass_seed, int64_t position)
      : state_(pass_seed ^ (0xA24BAED4963EE407ULL * static_cast<uint64_t>(position + 1))) {}
  double Uniform() { return SplitMix64Unit(&state_); }
  // Uniform in [lo, hi].
  int64_t Between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(SplitMix64(&state_) % static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  uint64_t state_;
};

template <typename T>
void AugmentSample(const AugmentConfig& config, T* sample, int64_t planes, int64_t height,
                   int64_t width, SampleRandom& random, std::vector<T>& scratch) {
  const int64_t s = config.shift;
  const int64_t dy = s > 0 ? random.Between(-s, s) : 0;
  const int64_t dx = s > 0 ? random.Between(-s, s) : 0;
  const bool flip = config.flip && random.Uniform() < 0.5;
  const int64_t plane = height * width;
  if (dx != 0 || dy != 0 || flip) {
    scratch.assign(sample, sample + planes * plane);
    for (int64_t c = 0; c < planes; c++) {
      const T* in = scratch.data() + c * plane;
      T* out = sample + c * plane;
      for (int64_t y = 0; y < height; y++) {
        const int64_t sy = y - dy;
        for (int64_t x = 0; x < width; x++) {
          const int64_t shifted = x - dx;
          const int64_t sx = flip ? width - 1 - shifted : shifted;
          const bool inside = sy >= 0 && sy < height && sx >= 0 && sx < width;
          out[y * width + x] = inside ? in[sy * width + sx] : T{0};
        }
      }
    }
  }
  if (config.erase > 0 && random.Uniform() < config.erase) {
    // Zhong et al.: an area of 2-25% of the image, aspect ratio log-uniform in [0.3, 3.3].
    const double area = (0.02 + 0.23 * random.Uniform()) * static_cast<double>(plane);
    const double aspect =
        std::exp(std::log(0.3) + (std::log(3.3) - std::log(0.3)) * random.Uniform());
    const int64_t h = std::clamp<int64_t>(std::llround(std::sqrt(area * aspect)), 1, height);
    const int64_t w = std::clamp<int64_t>(std::llround(std::sqrt(area / aspect)), 1, width);
    const int64_t y0 = random.Between(0, height - h);
    const int64_t x0 = random.Between(0, width - w);
    for (int64_t c = 0; c < planes; c++) {
      for (int64_t y = y0; y < y0 + h; y++) {
        std::fill_n(sample + c * plane + y * width + x0, w, T{0});
      }
    }
  }
}

template <typename T>
void AugmentRows(const AugmentConfig& config, const std::vector<uint64_t>& shape, T* features,
                 int64_t rows, uint64_t pass_seed, int64_t first_position) {
  const auto height = static_cast<int64_t>(shape[shape.size() - 2]);
  const auto width = static_cast<int64_t>(shape.back());
  int64_t planes = 1;
  for (size_t d = 0; d + 2 < shape.size(); d++) planes *= static_cast<int64_t>(shape[d]);
  const int64_t sample_size = planes * height * width;
  std::vector<T> scratch;
  for (int64_t j = 0; j < rows; j++) {
    SampleRandom random(pass_seed, first_position + j);
    AugmentSample(config, features + j * sample_size, planes, height, width, random, scratch);
  }
}

}  // namespace

uint64_t AugmentPassSeed(uint64_t member_seed, int64_t epoch) {
  uint64_t state = member_seed ^ 0x6A09E667F3BCC909ULL;
  state += 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(epoch);
  return SplitMix64(&state);
}

std::string CheckAugmentShape(const AugmentConfig& config,
                              const std::vector<uint64_t>& feature_shape) {
  if (!config.enabled()) return "";
  std::string shape;
  for (uint64_t d : feature_shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  if (feature_shape.size() < 2) {
    return "augment needs image features (the last two dimensions are height and width), and "
           "the table's features are [" +
           shape + "]";
  }
  const uint64_t side = std::min(feature_shape[feature_shape.size() - 2], feature_shape.back());
  if (config.shift > 0 && static_cast<uint64_t>(config.shift) >= side) {
    return "augment.shift " + std::to_string(config.shift) +
           " is not smaller than the image's side (features [" + shape + "])";
  }
  return "";
}

Status AugmentBatch(const AugmentConfig& config, store::Dtype dtype,
                    const std::vector<uint64_t>& feature_shape, std::byte* features, int64_t rows,
                    uint64_t pass_seed, int64_t first_position) {
  if (!config.enabled() || rows == 0) return Status::OK();
  if (std::string why = CheckAugmentShape(config, feature_shape); !why.empty()) {
    return Status::InvalidArgument(why);
  }
  if (dtype == store::Dtype::kUint8) {
    AugmentRows(config, feature_shape, reinterpret_cast<uint8_t*>(features), rows, pass_seed,
                first_position);
  } else if (dtype == store::Dtype::kFloat32) {
    AugmentRows(config, feature_shape, reinterpret_cast<float*>(features), rows, pass_seed,
                first_position);
  } else {
    return Status::InvalidArgument(std::string("augment: features of dtype ") +
                                   store::DtypeDescr(dtype) + " (uint8 or float32 only)");
  }
  return Status::OK();
}

}  // namespace cohort::model
