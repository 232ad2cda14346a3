#include "model/augment.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <utility>

namespace cohort::model {
namespace {

constexpr int64_t kSide = 9;

// `rows` images of kSide x kSide, each with one pixel set (at its centre) to 200.
std::vector<uint8_t> Dots(int64_t rows) {
  std::vector<uint8_t> images(static_cast<size_t>(rows * kSide * kSide), 0);
  for (int64_t j = 0; j < rows; j++) images[j * kSide * kSide + 4 * kSide + 4] = 200;
  return images;
}

Status Augment(const AugmentConfig& config, std::vector<uint8_t>& images, uint64_t seed,
               int64_t first = 0, std::vector<uint64_t> shape = {kSide, kSide}) {
  int64_t size = 1;
  for (uint64_t d : shape) size *= static_cast<int64_t>(d);
  return AugmentBatch(config, store::Dtype::kUint8, shape,
                      reinterpret_cast<std::byte*>(images.data()),
                      static_cast<int64_t>(images.size()) / size, seed, first);
}

// Where each image's bright pixel went: (dy, dx) from the centre.
std::vector<std::pair<int64_t, int64_t>> DotMoves(const std::vector<uint8_t>& images) {
  std::vector<std::pair<int64_t, int64_t>> moves;
  for (size_t j = 0; j * kSide * kSide < images.size(); j++) {
    for (int64_t p = 0; p < kSide * kSide; p++) {
      if (images[j * kSide * kSide + p] == 200) moves.emplace_back(p / kSide - 4, p % kSide - 4);
    }
  }
  return moves;
}

TEST(AugmentTest, ShiftsMoveTheImageByUpToShiftPixels) {
  std::vector<uint8_t> images = Dots(400);
  ASSERT_TRUE(Augment({.shift = 2}, images, 7).ok());
  auto moves = DotMoves(images);
  ASSERT_EQ(moves.size(), 400u);  // a shift of 2 keeps a centred dot inside a 9 x 9 image
  std::set<std::pair<int64_t, int64_t>> seen(moves.begin(), moves.end());
  EXPECT_EQ(seen.size(), 25u);  // every (dy, dx) in [-2, 2]^2 occurs
  for (auto [dy, dx] : moves) {
    EXPECT_LE(std::abs(dy), 2);
    EXPECT_LE(std::abs(dx), 2);
  }
  // Every other pixel stays empty: a shift moves, it does not smear.
  size_t lit = 0;
  for (uint8_t v : images) lit += v != 0;
  EXPECT_EQ(lit, 400u);
}

TEST(AugmentTest, FlipsMirrorAboutHalfOfTheImages) {
  // A dot left of centre: a flip puts it as far right.
  std::vector<uint8_t> images(static_cast<size_t>(1000 * kSide * kSide), 0);
  for (int64_t j = 0; j < 1000; j++) images[j * kSide * kSide + 4 * kSide + 1] = 200;
  ASSERT_TRUE(Augment({.flip = true}, images, 3).ok());
  int flipped = 0;
  for (int64_t j = 0; j < 1000; j++) {
    const uint8_t* image = images.data() + j * kSide * kSide;
    const bool left = image[4 * kSide + 1] == 200, right = image[4 * kSide + 7] == 200;
    EXPECT_NE(left, right);
    flipped += right;
  }
  EXPECT_NEAR(flipped, 500, 80);
}

TEST(AugmentTest, ErasingZeroesOneRectangleWithTheGivenProbability) {
  const int64_t rows = 1000;
  std::vector<uint8_t> ones(static_cast<size_t>(rows * kSide * kSide), 1);
  std::vector<uint8_t> images = ones;
  ASSERT_TRUE(Augment({.erase = 0.5}, images, 5).ok());
  int erased = 0;
  for (int64_t j = 0; j < rows; j++) {
    const uint8_t* image = images.data() + j * kSide * kSide;
    int64_t y0 = kSide, y1 = -1, x0 = kSide, x1 = -1, zeros = 0;
    for (int64_t p = 0; p < kSide * kSide; p++) {
      if (image[p] != 0) continue;
      zeros++;
      y0 = std::min(y0, p / kSide), y1 = std::max(y1, p / kSide);
      x0 = std::min(x0, p % kSide), x1 = std::max(x1, p % kSide);
    }
    if (zeros == 0) continue;
    erased++;
    EXPECT_EQ(zeros, (y1 - y0 + 1) * (x1 - x0 + 1));  // one solid rectangle
    EXPECT_LE(zeros, kSide * kSide / 2);
  }
  EXPECT_NEAR(erased, 500, 80);
  images = ones;
  ASSERT_TRUE(Augment({.shift = 0, .flip = false, .erase = 0}, images, 5).ok());
  EXPECT_EQ(images, ones);
}

TEST(AugmentTest, ASampleDependsOnlyOnTheSeedAndItsPositionInThePass) {
  const AugmentConfig all{.shift = 3, .flip = true, .erase = 0.5};
  std::vector<uint8_t> whole = Dots(10), again = Dots(10), other = Dots(10);
  for (size_t i = 0; i < whole.size(); i++) whole[i] = static_cast<uint8_t>(whole[i] + i % 7);
  again = whole;
  other = whole;
  ASSERT_TRUE(Augment(all, whole, 11).ok());
  ASSERT_TRUE(Augment(all, again, 11).ok());
  EXPECT_EQ(whole, again);
  ASSERT_TRUE(Augment(all, other, 12).ok());
  EXPECT_NE(whole, other);
  // The same pass cut into two batches at another boundary.
  std::vector<uint8_t> split = Dots(10);
  for (size_t i = 0; i < split.size(); i++) split[i] = static_cast<uint8_t>(split[i] + i % 7);
  const size_t half = 4 * kSide * kSide;
  std::vector<uint8_t> first(split.begin(), split.begin() + half);
  std::vector<uint8_t> second(split.begin() + half, split.end());
  ASSERT_TRUE(Augment(all, first, 11, 0).ok());
  ASSERT_TRUE(Augment(all, second, 11, 4).ok());
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_EQ(first, whole);
  EXPECT_NE(AugmentPassSeed(1, 1), AugmentPassSeed(1, 2));
  EXPECT_NE(AugmentPassSeed(1, 1), AugmentPassSeed(2, 1));
}

TEST(AugmentTest, ChannelsMoveTogetherAndFloatsAugmentLikeBytes) {
  // Two planes of one image, the second the first plus one where lit.
  std::vector<uint8_t> planes(2 * kSide * kSide, 0);
  planes[4 * kSide + 4] = 200;
  planes[kSide * kSide + 4 * kSide + 4] = 200;
  std::vector<uint8_t> bytes = planes;
  ASSERT_TRUE(Augment({.shift = 2, .flip = true}, bytes, 21, 0, {2, kSide, kSide}).ok());
  EXPECT_TRUE(
      std::equal(bytes.begin(), bytes.begin() + kSide * kSide, bytes.begin() + kSide * kSide));
  std::vector<float> floats(planes.begin(), planes.end());
  ASSERT_TRUE(AugmentBatch({.shift = 2, .flip = true}, store::Dtype::kFloat32, {2, kSide, kSide},
                           reinterpret_cast<std::byte*>(floats.data()), 1, 21, 0)
                  .ok());
  EXPECT_EQ(std::vector<float>(bytes.begin(), bytes.end()), floats);
}

TEST(AugmentTest, FeaturesThatAreNotImagesAreRefused) {
  EXPECT_EQ(CheckAugmentShape({}, {784}), "");  // off: any shape
  EXPECT_EQ(CheckAugmentShape({.flip = true}, {784}),
            "augment needs image features (the last two dimensions are height and width), and "
            "the table's features are [784]");
  EXPECT_EQ(CheckAugmentShape({.shift = 9}, {9, 12}),
            "augment.shift 9 is not smaller than the image's side (features [9, 12])");
  EXPECT_EQ(CheckAugmentShape({.shift = 8}, {1, 9, 12}), "");
  std::vector<uint8_t> images = Dots(1);
  EXPECT_FALSE(Augment({.flip = true}, images, 1, 0, {kSide * kSide}).ok());
  std::vector<int64_t> wide(81);
  EXPECT_FALSE(AugmentBatch({.flip = true}, store::Dtype::kInt64, {kSide, kSide},
                            reinterpret_cast<std::byte*>(wide.data()), 1, 1, 0)
                   .ok());
}

}  // namespace
}  // namespace cohort::model
