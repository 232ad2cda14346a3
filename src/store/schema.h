// TableSchema: the fixed shape and types of one table's samples.
//
// Features are uint8 or float32 of any fixed shape. Labels are int64 classes (kClass,
// scalar), float32 vectors of any fixed shape (kVector, regression targets), or absent
// (kNone, an unlabelled pool). The schema is set when a table is created and never changes.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/npy.h"

namespace cohort::store {

enum class LabelKind { kNone, kClass, kVector };

struct TableSchema {
  Dtype feature_dtype = Dtype::kFloat32;
  std::vector<uint64_t> feature_shape;  // shape of one sample
  LabelKind label_kind = LabelKind::kClass;
  std::vector<uint64_t> label_shape;  // empty for kClass and kNone

  size_t feature_row_bytes() const;
  Dtype label_dtype() const {
    return label_kind == LabelKind::kClass ? Dtype::kInt64 : Dtype::kFloat32;
  }
  size_t label_row_bytes() const;  // 0 for kNone
  bool has_labels() const { return label_kind != LabelKind::kNone; }

  // "features uint8[28, 28], labels class" for messages.
  std::string ToString() const;
  Status Validate() const;
  bool operator==(const TableSchema&) const = default;
};

const char* LabelKindName(LabelKind kind);
// A sample shape as "[28, 28]", as manifests and the CLI print it.
std::string DimsToString(const std::vector<uint64_t>& shape);

// Table names are [A-Za-z0-9_]{1,64}: they become parts of file names.
Status ValidateTableName(const std::string& name);

nlohmann::json SchemaToJson(const TableSchema& schema);
// `where` names the manifest and table for error messages.
Result<TableSchema> SchemaFromJson(const nlohmann::json& features, const nlohmann::json& labels,
                                   const std::string& where);

}  // namespace cohort::store
