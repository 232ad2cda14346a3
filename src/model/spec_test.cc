#include "model/spec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cohort::model {
namespace {

using Shape = std::vector<int64_t>;
using Shapes = std::vector<Shape>;

ModelSpec MustParse(const std::string& text) {
  auto spec = ParseModelSpec(text, "m");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.ok() ? *spec : ModelSpec{};
}

// The parse error message for `text` as member "m3" (empty if it parsed).
std::string ParseError(const std::string& text) {
  auto spec = ParseModelSpec(text, "m3");
  if (spec.ok()) return "";
  EXPECT_TRUE(spec.status().IsInvalidArgument());
  return spec.status().message();
}

// The shape error message for `text` on `input` with `outputs` (empty if it fit).
std::string ShapeError(const std::string& text, const Shape& input, int64_t outputs) {
  auto spec = ParseModelSpec(text, "m");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  if (!spec.ok()) return "parse failed";
  auto shapes = InferShapes(*spec, input, outputs, "m");
  if (shapes.ok()) return "";
  EXPECT_TRUE(shapes.status().IsInvalidArgument());
  return shapes.status().message();
}

// A one-line message that contains `needle`.
::testing::AssertionResult OneLineWith(const std::string& message, const std::string& needle) {
  if (message.find(needle) == std::string::npos) {
    return ::testing::AssertionFailure() << "'" << message << "' lacks '" << needle << "'";
  }
  if (message.find('\n') != std::string::npos) {
    return ::testing::AssertionFailure() << "'" << message << "' spans lines";
  }
  return ::testing::AssertionSuccess();
}

#define EXPECT_CONTAINS(message, needle) EXPECT_TRUE(OneLineWith((message), (needle)))

// ---------- parsing ----------

TEST(ParseModelSpecTest, IssueExample) {
  ModelSpec spec = MustParse("dense 256 relu, dropout 0.1, dense 10");
  EXPECT_EQ(spec.text, "dense 256 relu, dropout 0.1, dense 10");
  ASSERT_EQ(spec.layers.size(), 4u);
  EXPECT_EQ(spec.layers[0].kind, LayerKind::kDense);
  EXPECT_EQ(spec.layers[0].units, 256);
  EXPECT_EQ(spec.layers[0].index, 1);
  EXPECT_EQ(spec.layers[0].text, "dense 256 relu");
  EXPECT_EQ(spec.layers[1].kind, LayerKind::kActivation);
  EXPECT_EQ(spec.layers[1].activation, Activation::kRelu);
  EXPECT_EQ(spec.layers[1].index, 1);
  EXPECT_EQ(spec.layers[2].kind, LayerKind::kDropout);
  EXPECT_DOUBLE_EQ(spec.layers[2].rate, 0.1);
  EXPECT_EQ(spec.layers[2].index, 2);
  EXPECT_EQ(spec.layers[2].text, "dropout 0.1");
  EXPECT_EQ(spec.layers[3].kind, LayerKind::kDense);
  EXPECT_EQ(spec.layers[3].units, 10);
  EXPECT_EQ(spec.layers[3].index, 3);
  EXPECT_EQ(spec.layers[3].text, "dense 10");
}

TEST(ParseModelSpecTest, EveryLayerKind) {
  ModelSpec spec = MustParse(
      "conv2d 32 3, conv2d 8 5 2, conv2d 4 3 1 2, maxpool 2, avgpool 3, flatten, dropout 0, "
      "batchnorm, layernorm, relu, gelu, tanh, sigmoid, elu, silu, dense 7");
  ASSERT_EQ(spec.layers.size(), 16u);
  const LayerSpec& c1 = spec.layers[0];
  EXPECT_EQ(c1.kind, LayerKind::kConv2d);
  EXPECT_EQ(c1.units, 32);
  EXPECT_EQ(c1.kernel, 3);
  EXPECT_EQ(c1.stride, 1);
  EXPECT_EQ(c1.padding, 0);
  EXPECT_EQ(spec.layers[1].stride, 2);
  EXPECT_EQ(spec.layers[1].padding, 0);
  EXPECT_EQ(spec.layers[2].stride, 1);
  EXPECT_EQ(spec.layers[2].padding, 2);
  EXPECT_EQ(spec.layers[3].kind, LayerKind::kMaxPool);
  EXPECT_EQ(spec.layers[3].kernel, 2);
  EXPECT_EQ(spec.layers[4].kind, LayerKind::kAvgPool);
  EXPECT_EQ(spec.layers[4].kernel, 3);
  EXPECT_EQ(spec.layers[5].kind, LayerKind::kFlatten);
  EXPECT_EQ(spec.layers[6].kind, LayerKind::kDropout);
  EXPECT_EQ(spec.layers[6].rate, 0.0);
  EXPECT_EQ(spec.layers[7].kind, LayerKind::kBatchNorm);
  EXPECT_EQ(spec.layers[8].kind, LayerKind::kLayerNorm);
  const Activation acts[] = {Activation::kRelu,    Activation::kGelu, Activation::kTanh,
                             Activation::kSigmoid, Activation::kElu,  Activation::kSilu};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(spec.layers[9 + i].kind, LayerKind::kActivation);
    EXPECT_EQ(spec.layers[9 + i].activation, acts[i]);
    EXPECT_EQ(spec.layers[9 + i].index, 10 + i);
  }
  EXPECT_EQ(spec.layers[15].index, 16);
}

TEST(ParseModelSpecTest, ActivationAfterEveryKindOfLayer) {
  ModelSpec spec = MustParse(
      "conv2d 32 3 1 1 gelu, maxpool 2 tanh, batchnorm silu, flatten elu, dropout 0.5 sigmoid, "
      "layernorm relu, dense 10");
  ASSERT_EQ(spec.layers.size(), 13u);
  for (size_t i = 1; i < 12; i += 2) {
    EXPECT_EQ(spec.layers[i].kind, LayerKind::kActivation) << i;
    EXPECT_EQ(spec.layers[i].index, spec.layers[i - 1].index) << i;
    EXPECT_EQ(spec.layers[i].text, spec.layers[i - 1].text) << i;
  }
  EXPECT_EQ(spec.layers[1].activation, Activation::kGelu);
  EXPECT_EQ(spec.layers[3].activation, Activation::kTanh);
  EXPECT_EQ(spec.layers[5].activation, Activation::kSilu);
  EXPECT_EQ(spec.layers[7].activation, Activation::kElu);
  EXPECT_EQ(spec.layers[9].activation, Activation::kSigmoid);
  EXPECT_EQ(spec.layers[11].activation, Activation::kRelu);
  EXPECT_EQ(spec.layers[0].padding, 1);
  EXPECT_DOUBLE_EQ(spec.layers[8].rate, 0.5);
}

TEST(ParseModelSpecTest, WhitespaceTolerant) {
  ModelSpec spec = MustParse("  dense\t256   relu ,\n\tdropout 0.1\n,dense  10  \n");
  ASSERT_EQ(spec.layers.size(), 4u);
  EXPECT_EQ(spec.layers[0].units, 256);
  EXPECT_EQ(spec.layers[0].text, "dense 256 relu");  // normalised to one line
  EXPECT_EQ(spec.layers[1].kind, LayerKind::kActivation);
  EXPECT_EQ(spec.layers[2].text, "dropout 0.1");
  EXPECT_EQ(spec.layers[3].units, 10);
  EXPECT_EQ(spec.layers[3].text, "dense 10");
  // A single layer with no comma at all.
  EXPECT_EQ(MustParse("dense 3").layers.size(), 1u);
  // Errors keep the normalised text, on one line.
  std::string msg = ParseError("dense\n 4,\n dense\t\tx\n");
  EXPECT_CONTAINS(msg, "layer 2 'dense x'");
}

TEST(ParseModelSpecTest, SamePadding) {
  ModelSpec spec = MustParse("conv2d 16 5 1 same, conv2d 16 3 1 same, dense 2");
  EXPECT_EQ(spec.layers[0].padding, 2);
  EXPECT_EQ(spec.layers[1].padding, 1);
  EXPECT_CONTAINS(ParseError("conv2d 16 3 2 same, dense 2"), "padding 'same' needs stride 1");
  EXPECT_CONTAINS(ParseError("conv2d 16 4 1 same, dense 2"), "padding 'same' needs an odd kernel");
}

TEST(ParseModelSpecTest, ErrorsNameMemberLayerAndText) {
  std::string msg = ParseError("dense 256, dense x");
  EXPECT_EQ(msg, "member m3: layer 2 'dense x': 'x' is not a positive integer");
}

TEST(ParseModelSpecTest, UnknownLayer) {
  std::string msg = ParseError("dense 4, relu, flatten, conv3d 3");
  EXPECT_CONTAINS(msg, "member m3: layer 4 'conv3d 3': unknown layer 'conv3d'");
  EXPECT_CONTAINS(msg, "(layers: dense, conv2d, ");
  EXPECT_CONTAINS(msg, "silu)");
  // Keywords are case-sensitive, with a hint.
  msg = ParseError("Dense 10");
  EXPECT_CONTAINS(msg, "layer 1 'Dense 10': unknown layer 'Dense'");
  EXPECT_CONTAINS(msg, "'dense'");
  EXPECT_CONTAINS(ParseError("dense 10 ReLU"), "dense takes 1 argument (units), got 2");
}

TEST(ParseModelSpecTest, WrongArity) {
  EXPECT_EQ(ParseError("dense"),
            "member m3: layer 1 'dense': dense takes 1 argument (units), got 0");
  EXPECT_CONTAINS(ParseError("dense 10 20"), "dense takes 1 argument (units), got 2");
  EXPECT_CONTAINS(ParseError("dense 4, conv2d 32"),
                  "layer 2 'conv2d 32': conv2d takes 2 to 4 arguments (filters kernel [stride] "
                  "[padding]), got 1");
  EXPECT_CONTAINS(ParseError("conv2d 1 2 3 4 5"), "got 5");
  EXPECT_CONTAINS(ParseError("maxpool"), "maxpool takes 1 argument (kernel), got 0");
  EXPECT_CONTAINS(ParseError("avgpool 2 2"), "avgpool takes 1 argument (kernel), got 2");
  EXPECT_CONTAINS(ParseError("flatten 2"), "layer 1 'flatten 2': flatten takes 0 arguments, got 1");
  EXPECT_CONTAINS(ParseError("batchnorm 8"), "batchnorm takes 0 arguments, got 1");
  EXPECT_CONTAINS(ParseError("layernorm 8"), "layernorm takes 0 arguments, got 1");
  EXPECT_CONTAINS(ParseError("dropout"), "dropout takes 1 argument (rate), got 0");
  EXPECT_CONTAINS(ParseError("relu 3"), "layer 1 'relu 3': activation 'relu' takes no arguments");
  EXPECT_CONTAINS(ParseError("relu gelu"), "activation 'relu' takes no arguments");
}

TEST(ParseModelSpecTest, TrailingJunk) {
  EXPECT_CONTAINS(ParseError("dense 256 relu foo"),
                  "layer 1 'dense 256 relu foo': the activation 'relu' must be the last word");
  EXPECT_CONTAINS(ParseError("dense 256 relu gelu"), "only one activation may follow a layer");
  EXPECT_CONTAINS(ParseError("dense 256 foo"), "dense takes 1 argument (units), got 2");
  EXPECT_CONTAINS(ParseError("conv2d 3 3 1 1 relu x"), "must be the last word");
  EXPECT_CONTAINS(ParseError("dense 2, flatten now"), "layer 2 'flatten now'");
}

TEST(ParseModelSpecTest, EmptySpecAndEmptyItems) {
  EXPECT_EQ(ParseError(""), "member m3: the model spec is empty");
  EXPECT_EQ(ParseError(" \t\n "), "member m3: the model spec is empty");
  EXPECT_CONTAINS(ParseError("dense 4,,dense 2"), "member m3: layer 2 is empty");
  EXPECT_CONTAINS(ParseError("dense 4, \t ,dense 2"), "layer 2 is empty");
  EXPECT_CONTAINS(ParseError("dense 4, dense 2,"), "layer 3 is empty (a trailing comma?)");
  EXPECT_CONTAINS(ParseError(", dense 2"), "layer 1 is empty (a leading comma?)");
  EXPECT_CONTAINS(ParseError(","), "layer 1 is empty");
}

TEST(ParseModelSpecTest, IntegersAreStrict) {
  for (const char* bad :
       {"1e3", "-5", "3.5", "0", "+5", "x", "5x", "0x10", "99999999999999999999", "-0"}) {
    std::string text = std::string("dense ") + bad;
    std::string msg = ParseError(text);
    EXPECT_CONTAINS(msg, "'" + std::string(bad) + "' is not a positive integer");
    EXPECT_CONTAINS(msg, "layer 1 '" + text + "'");
  }
  EXPECT_CONTAINS(ParseError("conv2d 32 3.0"), "'3.0' is not a positive integer");
  EXPECT_CONTAINS(ParseError("conv2d 32 3 0"), "'0' is not a positive integer");  // stride
  EXPECT_CONTAINS(ParseError("conv2d 32 3 1 -1"), "'-1' is not a non-negative integer");
  EXPECT_CONTAINS(ParseError("conv2d 32 3 1 1.5"), "'1.5' is not a non-negative integer");
  EXPECT_CONTAINS(ParseError("maxpool 0"), "'0' is not a positive integer");
  EXPECT_CONTAINS(ParseError("avgpool -2"), "'-2' is not a positive integer");
  EXPECT_TRUE(ParseModelSpec("dense 007", "m").ok());
  EXPECT_TRUE(ParseModelSpec("conv2d 1 1 1 0, dense 1", "m").ok());
}

TEST(ParseModelSpecTest, DropoutRate) {
  for (const char* good : {"0", "0.0", "0.5", "0.999", ".25", "1e-1"}) {
    EXPECT_TRUE(ParseModelSpec(std::string("dropout ") + good + ", dense 1", "m").ok()) << good;
  }
  for (const char* bad : {"1.0", "1", "1.5", "-0.1", "x", "0.1.2", "nan", "inf", "0.5x"}) {
    std::string msg = ParseError(std::string("dense 4, dropout ") + bad);
    EXPECT_CONTAINS(msg, "member m3: layer 2 'dropout " + std::string(bad) + "': '" +
                             std::string(bad) + "' is not a dropout rate in [0, 1)");
  }
}

TEST(ParseModelSpecTest, NoMemberName) {
  auto spec = ParseModelSpec("dense x", "");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(), "layer 1 'dense x': 'x' is not a positive integer");
}

TEST(ActivationNameTest, AllNames) {
  EXPECT_STREQ(ActivationName(Activation::kRelu), "relu");
  EXPECT_STREQ(ActivationName(Activation::kGelu), "gelu");
  EXPECT_STREQ(ActivationName(Activation::kTanh), "tanh");
  EXPECT_STREQ(ActivationName(Activation::kSigmoid), "sigmoid");
  EXPECT_STREQ(ActivationName(Activation::kElu), "elu");
  EXPECT_STREQ(ActivationName(Activation::kSilu), "silu");
  // Round trip through the parser.
  for (Activation a : {Activation::kRelu, Activation::kGelu, Activation::kTanh,
                       Activation::kSigmoid, Activation::kElu, Activation::kSilu}) {
    ModelSpec spec = MustParse(std::string("dense 4 ") + ActivationName(a) + ", dense 1");
    ASSERT_EQ(spec.layers.size(), 3u);
    EXPECT_EQ(spec.layers[1].activation, a);
  }
}

// ---------- shapes and parameters ----------

TEST(InferShapesTest, IssueExample) {
  ModelSpec spec = MustParse("dense 256 relu, dropout 0.1, dense 10");
  auto shapes = InferShapes(spec, {28, 28}, 10, "m");
  ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
  EXPECT_EQ(*shapes, (Shapes{{256}, {256}, {256}, {10}}));
  auto params = CountParameters(spec, {28, 28}, 10, "m");
  ASSERT_TRUE(params.ok()) << params.status().ToString();
  EXPECT_EQ(*params, 784 * 256 + 256 + 256 * 10 + 10);
}

TEST(InferShapesTest, Cnn) {
  ModelSpec spec = MustParse(
      "conv2d 32 3 1 1 relu, maxpool 2, conv2d 64 3 relu, maxpool 2, flatten, dense 128 relu, "
      "dense 10");
  const Shapes expected = {{32, 28, 28}, {32, 28, 28}, {32, 14, 14}, {64, 12, 12}, {64, 12, 12},
                           {64, 6, 6},   {2304},       {128},        {128},        {10}};
  const int64_t params =
      (1 * 32 * 9 + 32) + (32 * 64 * 9 + 64) + (2304 * 128 + 128) + (128 * 10 + 10);
  for (const Shape& input : {Shape{28, 28}, Shape{1, 28, 28}}) {
    auto shapes = InferShapes(spec, input, 10, "m");
    ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
    EXPECT_EQ(*shapes, expected);
    auto n = CountParameters(spec, input, 10, "m");
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, params);
  }
  // Three input channels change only the first convolution's parameters.
  auto shapes = InferShapes(spec, {3, 28, 28}, 10, "m");
  ASSERT_TRUE(shapes.ok());
  EXPECT_EQ(*shapes, expected);
  auto n = CountParameters(spec, {3, 28, 28}, 10, "m");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, params + int64_t{2} * 32 * 9);
}

TEST(InferShapesTest, ConvStridePaddingAndPoolFloor) {
  ModelSpec spec =
      MustParse("conv2d 8 3 2, conv2d 4 5 1 same, conv2d 2 3 3 2, avgpool 2, maxpool 1, dense 1");
  auto shapes = InferShapes(spec, {3, 32, 31}, 1, "m");
  ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
  // (32 - 3) / 2 + 1 = 15, (31 - 3) / 2 + 1 = 15; same keeps 15; (15 + 4 - 3) / 3 + 1 = 6;
  // pool 2 -> 3; pool 1 keeps.
  EXPECT_EQ(*shapes, (Shapes{{8, 15, 15}, {4, 15, 15}, {2, 6, 6}, {2, 3, 3}, {2, 3, 3}, {1}}));
  // Pools floor: 7 / 2 = 3, and a non-square input keeps its aspect.
  spec = MustParse("maxpool 2, dense 1");
  shapes = InferShapes(spec, {7, 9}, 1, "m");
  ASSERT_TRUE(shapes.ok());
  EXPECT_EQ((*shapes)[0], (Shape{1, 3, 4}));
  // Kernel equal to the input gives 1x1.
  shapes = InferShapes(MustParse("conv2d 5 4, dense 1"), {4, 4}, 1, "m");
  ASSERT_TRUE(shapes.ok());
  EXPECT_EQ((*shapes)[0], (Shape{5, 1, 1}));
}

TEST(InferShapesTest, KernelTooBig) {
  std::string msg = ShapeError("conv2d 32 3, maxpool 2, maxpool 4, dense 10", {5, 5}, 10);
  EXPECT_CONTAINS(msg, "member m: layer 3 'maxpool 4': kernel 4 does not fit input (32, 1, 1)");
  msg = ShapeError("conv2d 32 3 1 1, maxpool 2, maxpool 4, dense 10", {4, 4}, 10);
  EXPECT_CONTAINS(msg, "layer 3 'maxpool 4': kernel 4 does not fit input (32, 2, 2)");
  EXPECT_CONTAINS(msg, "layer 2 'maxpool 2'");  // where that input came from
  msg = ShapeError("conv2d 8 5, dense 2", {3, 4}, 2);
  EXPECT_CONTAINS(msg, "member m: layer 1 'conv2d 8 5': kernel 5 does not fit input (1, 3, 4)");
  EXPECT_CONTAINS(msg, "the data's sample shape");
  msg = ShapeError("conv2d 8 7 1 1, dense 2", {4, 4}, 2);
  EXPECT_CONTAINS(msg, "kernel 7 with padding 1 does not fit input (1, 4, 4)");
  // Only one of the two sides too small still fails.
  EXPECT_CONTAINS(ShapeError("avgpool 3, dense 2", {10, 2}, 2), "kernel 3 does not fit input");
}

TEST(InferShapesTest, ImageLayersNeedAnImage) {
  std::string msg = ShapeError("conv2d 32 3, dense 10", {784}, 10);
  EXPECT_CONTAINS(msg,
                  "member m: layer 1 'conv2d 32 3': needs an image input (C, H, W) or (H, W);"
                  " got (784,)");
  EXPECT_CONTAINS(msg, "(28, 28) or (1, 28, 28)");  // suggests an image shape for the data
  EXPECT_CONTAINS(ShapeError("conv2d 32 3, dense 10", {100}, 10), "(10, 10) or (1, 10, 10)");
  EXPECT_CONTAINS(ShapeError("conv2d 32 3, dense 10", {20}, 10), "an image shape (H, W) or");
  msg = ShapeError("flatten, maxpool 2, dense 10", {28, 28}, 10);
  EXPECT_CONTAINS(msg, "layer 2 'maxpool 2': needs an image input");
  EXPECT_CONTAINS(msg, "got (784,) (the output of layer 1 'flatten')");
  msg = ShapeError("dense 16 relu, avgpool 2, dense 10", {28, 28}, 10);
  EXPECT_CONTAINS(msg, "layer 2 'avgpool 2'");
  EXPECT_CONTAINS(msg, "the output of layer 1 'dense 16 relu'");
  EXPECT_CONTAINS(ShapeError("conv2d 1 1, dense 1", {2, 3, 4, 5}, 1), "got (2, 3, 4, 5)");
}

TEST(InferShapesTest, DenseFlattensAnyRank) {
  ModelSpec spec = MustParse("dense 5");
  for (const Shape& input : {Shape{7}, Shape{3, 4}, Shape{2, 3, 4}, Shape{2, 2, 2, 2}}) {
    auto shapes = InferShapes(spec, input, 5, "m");
    ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
    EXPECT_EQ(*shapes, (Shapes{{5}}));
    int64_t in = 1;
    for (int64_t d : input) in *= d;
    auto n = CountParameters(spec, input, 5, "m");
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, in * 5 + 5);
  }
}

TEST(InferShapesTest, FlattenDropoutActivationsKeepOrFlattenShape) {
  ModelSpec spec = MustParse("relu, dropout 0.2, flatten, gelu, flatten, dense 3");
  auto shapes = InferShapes(spec, {2, 3, 4}, 3, "m");
  ASSERT_TRUE(shapes.ok());
  EXPECT_EQ(*shapes, (Shapes{{2, 3, 4}, {2, 3, 4}, {24}, {24}, {24}, {3}}));
  auto n = CountParameters(spec, {2, 3, 4}, 3, "m");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 24 * 3 + 3);
}

TEST(InferShapesTest, BatchNorm) {
  // Per channel on an image: 2 * C parameters.
  ModelSpec spec = MustParse("conv2d 16 3, batchnorm relu, flatten, dense 4");
  auto shapes = InferShapes(spec, {8, 8}, 4, "m");
  ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
  EXPECT_EQ((*shapes)[1], (Shape{16, 6, 6}));
  auto n = CountParameters(spec, {8, 8}, 4, "m");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, (9 * 16 + 16) + 2 * 16 + (16 * 36 * 4 + 4));
  // Per feature on a vector: 2 * N parameters.
  spec = MustParse("dense 32, batchnorm, dense 2");
  n = CountParameters(spec, {5}, 2, "m");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, (5 * 32 + 32) + 64 + (32 * 2 + 2));
  // A (C, H, W) data input is fine; an (H, W) one is ambiguous.
  EXPECT_EQ(ShapeError("batchnorm, dense 2", {3, 8, 8}, 2), "");
  std::string msg = ShapeError("batchnorm, dense 2", {28, 28}, 2);
  EXPECT_CONTAINS(msg,
                  "member m: layer 1 'batchnorm': batchnorm needs a (features,) or (C, H, W) "
                  "input; got (28, 28)");
  EXPECT_CONTAINS(msg, "flatten");
  EXPECT_CONTAINS(ShapeError("batchnorm, dense 2", {1, 2, 3, 4}, 2), "got (1, 2, 3, 4)");
}

TEST(InferShapesTest, LayerNormOverTheWholeSample) {
  ModelSpec spec = MustParse("layernorm, dense 2");
  for (const Shape& input : {Shape{10}, Shape{4, 5}, Shape{2, 3, 4}}) {
    auto shapes = InferShapes(spec, input, 2, "m");
    ASSERT_TRUE(shapes.ok());
    EXPECT_EQ((*shapes)[0], input);
    int64_t size = 1;
    for (int64_t d : input) size *= d;
    auto n = CountParameters(spec, input, 2, "m");
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 2 * size + size * 2 + 2);
  }
}

TEST(InferShapesTest, OutputLayer) {
  std::string msg = ShapeError("dense 64, dense 5", {28, 28}, 10);
  EXPECT_EQ(msg, "member m: output layer 2 'dense 5' has 5 units but the task needs 10 outputs");
  msg = ShapeError("dense 64, dense 10 relu", {28, 28}, 10);
  EXPECT_CONTAINS(msg, "member m: layer 2 'dense 10 relu': the last layer must be 'dense N'");
  EXPECT_CONTAINS(msg, "remove the final 'relu'");
  msg = ShapeError("dense 64, relu", {28, 28}, 10);
  EXPECT_CONTAINS(msg, "layer 2 'relu': the last layer must be 'dense N'");
  msg = ShapeError("conv2d 4 3, flatten", {28, 28}, 10);
  EXPECT_CONTAINS(msg, "layer 2 'flatten': the last layer must be 'dense N'");
  msg = ShapeError("dense 10, dropout 0.5", {4}, 10);
  EXPECT_CONTAINS(msg, "layer 2 'dropout 0.5': the last layer must be 'dense N'");
  // No dense at all.
  EXPECT_CONTAINS(ShapeError("relu", {4}, 4), "the last layer must be 'dense N'");
}

TEST(InferShapesTest, BadInputsAndOutputs) {
  ModelSpec spec = MustParse("dense 10");
  auto shapes = InferShapes(spec, {}, 10, "m");
  ASSERT_FALSE(shapes.ok());
  EXPECT_EQ(shapes.status().message(), "member m: the input shape is empty");
  shapes = InferShapes(spec, {28, 0}, 10, "m");
  ASSERT_FALSE(shapes.ok());
  EXPECT_CONTAINS(shapes.status().message(), "member m: input shape (28, 0)");
  shapes = InferShapes(spec, {-1}, 10, "m");
  ASSERT_FALSE(shapes.ok());
  EXPECT_CONTAINS(shapes.status().message(), "(-1,)");
  shapes = InferShapes(spec, {4}, 0, "m");
  ASSERT_FALSE(shapes.ok());
  EXPECT_CONTAINS(shapes.status().message(), "member m: the task needs 0 outputs");
  shapes = InferShapes(ModelSpec{}, {4}, 10, "m");
  ASSERT_FALSE(shapes.ok());
  EXPECT_CONTAINS(shapes.status().message(), "no layers");
  shapes = InferShapes(spec, {int64_t{1} << 40, int64_t{1} << 40}, 10, "m");
  ASSERT_FALSE(shapes.ok());
  EXPECT_CONTAINS(shapes.status().message(), "too large");
  auto n = CountParameters(spec, {}, 10, "m");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(), "member m: the input shape is empty");
}

TEST(InferShapesTest, HandBuiltSpecsAreValidated) {
  ModelSpec spec;
  LayerSpec dense;
  dense.kind = LayerKind::kDense;
  dense.units = 0;
  dense.text = "dense 0";
  dense.index = 1;
  spec.layers.push_back(dense);
  auto shapes = InferShapes(spec, {4}, 1, "m");
  ASSERT_FALSE(shapes.ok());
  EXPECT_CONTAINS(shapes.status().message(), "layer 1 'dense 0': units must be positive");

  LayerSpec conv;
  conv.kind = LayerKind::kConv2d;
  conv.units = 4;
  conv.kernel = 3;
  conv.stride = 0;
  conv.text = "conv";
  conv.index = 1;
  spec.layers = {conv};
  EXPECT_CONTAINS(InferShapes(spec, {8, 8}, 1, "m").status().message(), "stride must be positive");

  LayerSpec drop;
  drop.kind = LayerKind::kDropout;
  drop.rate = 1.0;
  drop.text = "dropout";
  drop.index = 1;
  spec.layers = {drop};
  EXPECT_CONTAINS(InferShapes(spec, {8}, 1, "m").status().message(), "dropout rate");
}

TEST(CountParametersTest, OverflowIsAnError) {
  ModelSpec spec = MustParse("dense 4000000000, dense 4000000000, dense 1");
  auto n = CountParameters(spec, {4}, 1, "m");
  ASSERT_FALSE(n.ok());
  EXPECT_CONTAINS(n.status().message(),
                  "layer 2 'dense 4000000000': the parameter count overflows");
}

TEST(CountParametersTest, PropagatesShapeErrors) {
  ModelSpec spec = MustParse("dense 5");
  auto n = CountParameters(spec, {4}, 10, "m7");
  ASSERT_FALSE(n.ok());
  EXPECT_CONTAINS(n.status().message(), "member m7: output layer 1 'dense 5'");
}

}  // namespace
}  // namespace cohort::model
