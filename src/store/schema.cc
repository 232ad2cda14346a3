#include "store/schema.h"

#include <nlohmann/json.hpp>

#include "common/json_text.h"

namespace cohort::store {

size_t TableSchema::feature_row_bytes() const {
  size_t n = DtypeSize(feature_dtype);
  for (uint64_t d : feature_shape) n *= d;
  return n;
}

size_t TableSchema::label_row_bytes() const {
  if (label_kind == LabelKind::kNone) return 0;
  size_t n = DtypeSize(label_dtype());
  for (uint64_t d : label_shape) n *= d;
  return n;
}

const char* LabelKindName(LabelKind kind) {
  switch (kind) {
    case LabelKind::kNone:
      return "none";
    case LabelKind::kClass:
      return "class";
    case LabelKind::kVector:
      return "vector";
  }
  return "?";
}

std::string DimsToString(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string TableSchema::ToString() const {
  std::string s = std::string("features ") + DtypeName(feature_dtype) + DimsToString(feature_shape);
  s += std::string(", labels ") + LabelKindName(label_kind);
  if (label_kind == LabelKind::kVector) s += " float32" + DimsToString(label_shape);
  return s;
}

Status TableSchema::Validate() const {
  if (feature_dtype != Dtype::kUint8 && feature_dtype != Dtype::kFloat32) {
    return Status::InvalidArgument(std::string("features must be uint8 or float32, not ") +
                                   DtypeName(feature_dtype));
  }
  for (uint64_t d : feature_shape) {
    if (d == 0) return Status::InvalidArgument("feature shape has a zero dimension");
  }
  if (feature_row_bytes() > (1ull << 32)) {
    return Status::InvalidArgument("one sample's features exceed 4 GiB");
  }
  if (label_kind != LabelKind::kVector && !label_shape.empty()) {
    return Status::InvalidArgument("only vector labels have a shape");
  }
  for (uint64_t d : label_shape) {
    if (d == 0) return Status::InvalidArgument("label shape has a zero dimension");
  }
  return Status::OK();
}

Status ValidateTableName(const std::string& name) {
  if (name.empty() || name.size() > 64) {
    return Status::InvalidArgument("table name '" + name + "' must be 1 to 64 characters");
  }
  for (char c : name) {
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) {
      return Status::InvalidArgument("table name '" + name +
                                     "' may only hold letters, digits and '_'");
    }
  }
  return Status::OK();
}

nlohmann::json SchemaToJson(const TableSchema& schema) {
  nlohmann::json labels = {{"kind", LabelKindName(schema.label_kind)}};
  if (schema.has_labels()) {
    labels["dtype"] = DtypeName(schema.label_dtype());
    labels["shape"] = schema.label_shape;
  }
  return {
      {"features", {{"dtype", DtypeName(schema.feature_dtype)}, {"shape", schema.feature_shape}}},
      {"labels", labels}};
}

Result<TableSchema> SchemaFromJson(const nlohmann::json& features, const nlohmann::json& labels,
                                   const std::string& where) {
  TableSchema s;
  try {
    auto dtype = DtypeFromName(features.at("dtype").get<std::string>());
    if (!dtype.ok()) return Status::Corruption(where + ": " + dtype.status().message());
    s.feature_dtype = *dtype;
    s.feature_shape = JsonUintArray(features.at("shape"));
    std::string kind = labels.at("kind").get<std::string>();
    if (kind == "none") {
      s.label_kind = LabelKind::kNone;
    } else if (kind == "class") {
      s.label_kind = LabelKind::kClass;
    } else if (kind == "vector") {
      s.label_kind = LabelKind::kVector;
      s.label_shape = JsonUintArray(labels.at("shape"));
    } else {
      return Status::Corruption(where + ": unknown label kind '" + kind + "'");
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(where + ": bad schema: " + e.what());
  }
  Status st = s.Validate();
  if (!st.ok()) return Status::Corruption(where + ": " + st.message());
  return s;
}

}  // namespace cohort::store
