// Data augmentation for image members: random shifts (zero padding, then a crop back to the
// image's size), horizontal flips and random erasing (Zhong et al. 2020), applied to each
// training batch in place on the pipeline's thread, before libtorch sees it.
//
// A sample's features are an image whose last two dimensions are its height and width (any
// leading dimensions, channels, move together). Each sample draws from its own splitmix64
// stream, seeded from the pass's seed and the sample's position in the pass, so what a sample
// looks like depends on the seed, the epoch's order and nothing else: not on threads, batch
// boundaries or timing. Prediction and validation passes are never augmented.
//
// Thread-safety: a pure function over caller-owned memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "model/train_config.h"
#include "store/npy.h"

namespace cohort::model {

// The seed of one training pass: every epoch draws other augmentations.
uint64_t AugmentPassSeed(uint64_t member_seed, int64_t epoch);

// "" when `config` can augment features of this shape, else why not ("augment needs image
// features: the last two dimensions are height and width, and table features are [784]").
std::string CheckAugmentShape(const AugmentConfig& config,
                              const std::vector<uint64_t>& feature_shape);

// Augments `rows` samples of `features` (dtype uint8 or float32, each of `feature_shape`) in
// place; sample j is the (first_position + j)-th of its pass. Erased pixels and pixels shifted
// in from outside the image are 0, the stored value of an empty pixel.
Status AugmentBatch(const AugmentConfig& config, store::Dtype dtype,
                    const std::vector<uint64_t>& feature_shape, std::byte* features, int64_t rows,
                    uint64_t pass_seed, int64_t first_position);

}  // namespace cohort::model
