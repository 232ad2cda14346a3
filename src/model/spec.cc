#include "model/spec.h"

#include <charconv>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string_view>
#include <system_error>

namespace cohort::model {
namespace {

using Shape = std::vector<int64_t>;

constexpr const char* kLayerNames =
    "dense, conv2d, maxpool, avgpool, flatten, dropout, batchnorm, layernorm, relu, gelu, tanh, "
    "sigmoid, elu, silu";

constexpr const char* kOutputRule =
    "the last layer must be 'dense N' (the output layer; the loss adds softmax or the regression "
    "head itself)";

// "member m3: " or "" when no member name was given.
std::string MemberPrefix(const std::string& member) {
  if (member.empty()) return "";
  return "member " + member + ": ";
}

std::string LayerPrefix(const std::string& member, int index, const std::string& text) {
  return MemberPrefix(member) + "layer " + std::to_string(index) + " '" + text + "': ";
}

Status LayerError(const std::string& member, const LayerSpec& layer, const std::string& what) {
  return Status::InvalidArgument(LayerPrefix(member, layer.index, layer.text) + what);
}

// Python tuple style: "(784,)", "(32, 2, 2)".
std::string ShapeString(const Shape& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  return out + ")";
}

std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> Product(const Shape& shape) {
  int64_t p = 1;
  for (int64_t d : shape) {
    auto next = CheckedMul(p, d);
    if (!next) return std::nullopt;
    p = *next;
  }
  return p;
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::vector<std::string> SplitWords(std::string_view item) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < item.size()) {
    while (i < item.size() && IsSpace(item[i])) ++i;
    size_t start = i;
    while (i < item.size() && !IsSpace(item[i])) ++i;
    if (i > start) words.emplace_back(item.substr(start, i - start));
  }
  return words;
}

std::string JoinWords(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) {
    if (!out.empty()) out += ' ';
    out += w;
  }
  return out;
}

std::optional<Activation> ActivationFromName(std::string_view name) {
  if (name == "relu") return Activation::kRelu;
  if (name == "gelu") return Activation::kGelu;
  if (name == "tanh") return Activation::kTanh;
  if (name == "sigmoid") return Activation::kSigmoid;
  if (name == "elu") return Activation::kElu;
  if (name == "silu") return Activation::kSilu;
  return std::nullopt;
}

// A whole word parsed as a base-10 int64 (no sign, exponent, fraction or junk).
std::optional<int64_t> ParseInt(const std::string& word) {
  int64_t v = 0;
  const char* end = word.data() + word.size();
  auto [ptr, ec] = std::from_chars(word.data(), end, v);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

std::optional<double> ParseDouble(const std::string& word) {
  double v = 0;
  const char* end = word.data() + word.size();
  auto [ptr, ec] = std::from_chars(word.data(), end, v, std::chars_format::general);
  if (ec != std::errc() || ptr != end || !std::isfinite(v)) return std::nullopt;
  return v;
}

struct LayerInfo {
  const char* name;
  LayerKind kind;
  size_t min_args;
  size_t max_args;
  const char* usage;  // argument names for arity messages
};

constexpr LayerInfo kLayers[] = {
    {"dense", LayerKind::kDense, 1, 1, "units"},
    {"conv2d", LayerKind::kConv2d, 2, 4, "filters kernel [stride] [padding]"},
    {"maxpool", LayerKind::kMaxPool, 1, 1, "kernel"},
    {"avgpool", LayerKind::kAvgPool, 1, 1, "kernel"},
    {"flatten", LayerKind::kFlatten, 0, 0, ""},
    {"dropout", LayerKind::kDropout, 1, 1, "rate"},
    {"batchnorm", LayerKind::kBatchNorm, 0, 0, ""},
    {"layernorm", LayerKind::kLayerNorm, 0, 0, ""},
};

const LayerInfo* FindLayer(std::string_view name) {
  for (const LayerInfo& info : kLayers) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

std::string ArityMessage(const LayerInfo& info, size_t got) {
  std::string n;
  if (info.min_args == info.max_args) {
    n = std::to_string(info.min_args) + (info.min_args == 1 ? " argument" : " arguments");
  } else {
    n = std::to_string(info.min_args) + " to " + std::to_string(info.max_args) + " arguments";
  }
  std::string out = std::string(info.name) + " takes " + n;
  if (info.usage[0] != '\0') out += " (" + std::string(info.usage) + ")";
  return out + ", got " + std::to_string(got);
}

// Parses one comma-separated item (already split into words) into one or two layers.
Status ParseItem(const std::vector<std::string>& words, int index, const std::string& member,
                 std::vector<LayerSpec>* out) {
  LayerSpec layer;
  layer.index = index;
  layer.text = JoinWords(words);
  auto fail = [&](const std::string& what) { return LayerError(member, layer, what); };

  const std::string& name = words[0];
  if (auto act = ActivationFromName(name)) {
    if (words.size() > 1) {
      return fail("activation '" + name + "' takes no arguments, got '" + words[1] + "'");
    }
    layer.kind = LayerKind::kActivation;
    layer.activation = *act;
    out->push_back(layer);
    return Status::OK();
  }

  const LayerInfo* info = FindLayer(name);
  if (info == nullptr) {
    std::string lower;
    for (char c : name) lower += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    if (lower != name && (FindLayer(lower) != nullptr || ActivationFromName(lower))) {
      return fail("unknown layer '" + name + "' (names are lowercase: '" + lower + "')");
    }
    return fail("unknown layer '" + name + "' (layers: " + kLayerNames + ")");
  }
  layer.kind = info->kind;

  std::vector<std::string> args(words.begin() + 1, words.end());
  std::optional<Activation> trailing;
  if (!args.empty()) {
    trailing = ActivationFromName(args.back());
    if (trailing) args.pop_back();
  }
  for (const std::string& a : args) {
    if (ActivationFromName(a)) {
      if (trailing) return fail("only one activation may follow a layer, got '" + a + "' too");
      return fail("the activation '" + a + "' must be the last word of the item");
    }
  }
  if (args.size() < info->min_args || args.size() > info->max_args) {
    return fail(ArityMessage(*info, args.size()));
  }

  auto positive = [&](size_t i, int64_t* v) -> Status {
    auto parsed = ParseInt(args[i]);
    if (!parsed || *parsed <= 0) return fail("'" + args[i] + "' is not a positive integer");
    *v = *parsed;
    return Status::OK();
  };

  switch (info->kind) {
    case LayerKind::kDense:
      COHORT_RETURN_IF_ERROR(positive(0, &layer.units));
      break;
    case LayerKind::kConv2d: {
      COHORT_RETURN_IF_ERROR(positive(0, &layer.units));
      COHORT_RETURN_IF_ERROR(positive(1, &layer.kernel));
      if (args.size() >= 3) COHORT_RETURN_IF_ERROR(positive(2, &layer.stride));
      if (args.size() >= 4) {
        if (args[3] == "same") {
          if (layer.stride != 1) return fail("padding 'same' needs stride 1");
          if (layer.kernel % 2 == 0) return fail("padding 'same' needs an odd kernel");
          layer.padding = layer.kernel / 2;
        } else {
          auto parsed = ParseInt(args[3]);
          if (!parsed || *parsed < 0) {
            return fail("'" + args[3] + "' is not a non-negative integer or 'same'");
          }
          layer.padding = *parsed;
        }
      }
      break;
    }
    case LayerKind::kMaxPool:
    case LayerKind::kAvgPool:
      COHORT_RETURN_IF_ERROR(positive(0, &layer.kernel));
      break;
    case LayerKind::kDropout: {
      auto parsed = ParseDouble(args[0]);
      if (!parsed || *parsed < 0 || *parsed >= 1) {
        return fail("'" + args[0] + "' is not a dropout rate in [0, 1)");
      }
      layer.rate = *parsed;
      break;
    }
    case LayerKind::kFlatten:
    case LayerKind::kBatchNorm:
    case LayerKind::kLayerNorm:
    case LayerKind::kActivation:
      break;
  }
  out->push_back(layer);
  if (trailing) {
    LayerSpec act;
    act.kind = LayerKind::kActivation;
    act.activation = *trailing;
    act.index = index;
    act.text = layer.text;
    out->push_back(act);
  }
  return Status::OK();
}

// Where a layer's input came from, for messages about a wrong input rank.
std::string InputOrigin(const ModelSpec& spec, size_t i) {
  if (i == 0) return "the data's sample shape";
  const LayerSpec& prev = spec.layers[i - 1];
  return "the output of layer " + std::to_string(prev.index) + " '" + prev.text + "'";
}

// The (C, H, W) view of an image input, or an error for other ranks.
Result<Shape> ImageShape(const ModelSpec& spec, size_t i, const Shape& in,
                         const std::string& member) {
  if (in.size() == 2) return Shape{1, in[0], in[1]};
  if (in.size() == 3) return in;
  const LayerSpec& layer = spec.layers[i];
  std::string what = "needs an image input (C, H, W) or (H, W); got " + ShapeString(in) + " (" +
                     InputOrigin(spec, i) + ")";
  if (i == 0) {
    // A flat square image (784 = 28 * 28) most likely wants its (H, W) back.
    int64_t side = in.size() == 1 ? static_cast<int64_t>(std::llround(std::sqrt(in[0]))) : 0;
    if (side > 0 && side * side == in[0]) {
      std::string hw = std::to_string(side) + ", " + std::to_string(side);
      what += "; give the data an image shape such as (" + hw + ") or (1, " + hw + ")";
    } else {
      what += "; give the data an image shape (H, W) or (C, H, W)";
    }
  }
  return LayerError(member, layer, what);
}

Status ValidateLayer(const LayerSpec& layer, const std::string& member) {
  switch (layer.kind) {
    case LayerKind::kDense:
      if (layer.units <= 0) return LayerError(member, layer, "units must be positive");
      break;
    case LayerKind::kConv2d:
      if (layer.units <= 0) return LayerError(member, layer, "filters must be positive");
      if (layer.kernel <= 0) return LayerError(member, layer, "kernel must be positive");
      if (layer.stride <= 0) return LayerError(member, layer, "stride must be positive");
      if (layer.padding < 0) return LayerError(member, layer, "padding must not be negative");
      break;
    case LayerKind::kMaxPool:
    case LayerKind::kAvgPool:
      if (layer.kernel <= 0) return LayerError(member, layer, "kernel must be positive");
      break;
    case LayerKind::kDropout:
      if (!(layer.rate >= 0 && layer.rate < 1)) {
        return LayerError(member, layer, "dropout rate must be in [0, 1)");
      }
      break;
    case LayerKind::kFlatten:
    case LayerKind::kBatchNorm:
    case LayerKind::kLayerNorm:
    case LayerKind::kActivation:
      break;
  }
  return Status::OK();
}

}  // namespace

Result<ModelSpec> ParseModelSpec(const std::string& text, const std::string& member) {
  ModelSpec spec;
  spec.text = text;
  std::vector<std::string_view> items;
  std::string_view rest = text;
  while (true) {
    size_t comma = rest.find(',');
    items.push_back(rest.substr(0, comma));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (items.size() == 1 && SplitWords(items[0]).empty()) {
    return Status::InvalidArgument(MemberPrefix(member) + "the model spec is empty");
  }
  for (size_t i = 0; i < items.size(); ++i) {
    int index = static_cast<int>(i) + 1;
    std::vector<std::string> words = SplitWords(items[i]);
    if (words.empty()) {
      std::string where = i + 1 == items.size() ? " (a trailing comma?)"
                          : i == 0              ? " (a leading comma?)"
                                                : " (two commas in a row?)";
      return Status::InvalidArgument(MemberPrefix(member) + "layer " + std::to_string(index) +
                                     " is empty" + where);
    }
    COHORT_RETURN_IF_ERROR(ParseItem(words, index, member, &spec.layers));
  }
  return spec;
}

Result<std::vector<std::vector<int64_t>>> InferShapes(const ModelSpec& spec,
                                                      const std::vector<int64_t>& input_shape,
                                                      int64_t outputs, const std::string& member) {
  const std::string prefix = MemberPrefix(member);
  if (input_shape.empty()) {
    return Status::InvalidArgument(prefix + "the input shape is empty");
  }
  for (int64_t d : input_shape) {
    if (d <= 0) {
      return Status::InvalidArgument(prefix + "input shape " + ShapeString(input_shape) +
                                     " has a non-positive dimension");
    }
  }
  if (!Product(input_shape)) {
    return Status::InvalidArgument(prefix + "input shape " + ShapeString(input_shape) +
                                   " is too large");
  }
  if (outputs <= 0) {
    return Status::InvalidArgument(prefix + "the task needs " + std::to_string(outputs) +
                                   " outputs; it must be positive");
  }
  if (spec.layers.empty()) {
    return Status::InvalidArgument(prefix + "the model spec has no layers");
  }

  std::vector<Shape> shapes;
  shapes.reserve(spec.layers.size());
  Shape cur = input_shape;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& layer = spec.layers[i];
    COHORT_RETURN_IF_ERROR(ValidateLayer(layer, member));
    switch (layer.kind) {
      case LayerKind::kDense:
        cur = {layer.units};
        break;
      case LayerKind::kConv2d:
      case LayerKind::kMaxPool:
      case LayerKind::kAvgPool: {
        COHORT_ASSIGN_OR_RETURN(Shape img, ImageShape(spec, i, cur, member));
        bool conv = layer.kind == LayerKind::kConv2d;
        int64_t stride = conv ? layer.stride : layer.kernel;
        int64_t pad = conv ? layer.padding : 0;
        Shape next = {conv ? layer.units : img[0], 0, 0};
        for (int d = 1; d <= 2; ++d) {
          auto padded = CheckedAdd(img[d], pad);
          if (padded) padded = CheckedAdd(*padded, pad);
          if (!padded) return LayerError(member, layer, "padding is too large");
          if (*padded < layer.kernel) {
            std::string what = "kernel " + std::to_string(layer.kernel);
            if (pad > 0) what += " with padding " + std::to_string(pad);
            return LayerError(member, layer,
                              what + " does not fit input " + ShapeString(img) + " (" +
                                  InputOrigin(spec, i) + ")");
          }
          next[d] = (*padded - layer.kernel) / stride + 1;
        }
        cur = next;
        break;
      }
      case LayerKind::kFlatten:
        cur = {*Product(cur)};
        break;
      case LayerKind::kBatchNorm:
        if (cur.size() != 1 && cur.size() != 3) {
          return LayerError(member, layer,
                            "batchnorm needs a (features,) or (C, H, W) input; got " +
                                ShapeString(cur) + " (" + InputOrigin(spec, i) +
                                "); put 'flatten' before it, or a conv2d for channels");
        }
        break;
      case LayerKind::kDropout:
      case LayerKind::kLayerNorm:
      case LayerKind::kActivation:
        break;
    }
    // Every layer's output must stay countable (parameters, activations memory).
    if (!Product(cur)) {
      return LayerError(member, layer, "output shape " + ShapeString(cur) + " is too large");
    }
    shapes.push_back(cur);
  }

  const LayerSpec& last = spec.layers.back();
  if (last.kind != LayerKind::kDense) {
    std::string what = kOutputRule;
    if (last.kind == LayerKind::kActivation) {
      what += std::string("; remove the final '") + ActivationName(last.activation) + "'";
    }
    return LayerError(member, last, what);
  }
  if (last.units != outputs) {
    return Status::InvalidArgument(prefix + "output layer " + std::to_string(last.index) + " '" +
                                   last.text + "' has " + std::to_string(last.units) +
                                   " units but the task needs " + std::to_string(outputs) +
                                   " outputs");
  }
  return shapes;
}

Result<int64_t> CountParameters(const ModelSpec& spec, const std::vector<int64_t>& input_shape,
                                int64_t outputs, const std::string& member) {
  COHORT_ASSIGN_OR_RETURN(std::vector<Shape> shapes,
                          InferShapes(spec, input_shape, outputs, member));
  int64_t total = 0;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& layer = spec.layers[i];
    const Shape& in = i == 0 ? input_shape : shapes[i - 1];
    std::optional<int64_t> n = 0;
    switch (layer.kind) {
      case LayerKind::kDense:
        // Product(in) is known to fit: InferShapes checked every shape.
        n = CheckedMul(*Product(in), layer.units);
        if (n) n = CheckedAdd(*n, layer.units);
        break;
      case LayerKind::kConv2d: {
        int64_t channels = in.size() == 3 ? in[0] : 1;
        n = CheckedMul(channels, layer.units);
        if (n) n = CheckedMul(*n, layer.kernel);
        if (n) n = CheckedMul(*n, layer.kernel);
        if (n) n = CheckedAdd(*n, layer.units);
        break;
      }
      case LayerKind::kBatchNorm:
        n = CheckedMul(2, in[0]);  // (features,) or (C, H, W): one scale and shift each
        break;
      case LayerKind::kLayerNorm:
        n = CheckedMul(2, *Product(in));
        break;
      case LayerKind::kMaxPool:
      case LayerKind::kAvgPool:
      case LayerKind::kFlatten:
      case LayerKind::kDropout:
      case LayerKind::kActivation:
        break;
    }
    if (n) n = CheckedAdd(total, *n);
    if (!n) return LayerError(member, layer, "the parameter count overflows");
    total = *n;
  }
  return total;
}

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kRelu:
      return "relu";
    case Activation::kGelu:
      return "gelu";
    case Activation::kTanh:
      return "tanh";
    case Activation::kSigmoid:
      return "sigmoid";
    case Activation::kElu:
      return "elu";
    case Activation::kSilu:
      return "silu";
  }
  return "unknown";
}

}  // namespace cohort::model
