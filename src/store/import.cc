#include "store/import.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "common/closest_name.h"
#include "common/file_util.h"

namespace cohort::store {

namespace {

constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 40;

// The byte size of an array of `shape` with elements of `elem` bytes; false on overflow.
bool CheckedBytes(std::span<const uint64_t> shape, uint64_t elem, uint64_t* bytes) {
  uint64_t n = elem;
  for (uint64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / d) return false;
    n *= d;
  }
  *bytes = n;
  return true;
}

// An array handed in by a caller must hold exactly the bytes its shape and dtype promise.
Status CheckConsistent(const HostArray& a, const std::string& what) {
  uint64_t bytes = 0;
  if (!CheckedBytes(a.shape, DtypeSize(a.dtype), &bytes) || bytes != a.data.size()) {
    return Status::InvalidArgument(
        what + ": " + DtypeName(a.dtype) + " array of shape " + ShapeToString(a.shape) + " holds " +
        std::to_string(a.data.size()) + " bytes, which does not " + "match its shape");
  }
  return Status::OK();
}

template <typename T>
T LoadAt(const HostArray& a, uint64_t i) {
  T v;
  std::memcpy(&v, a.data.data() + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void StoreAt(HostArray* a, uint64_t i, T v) {
  std::memcpy(a->data.data() + i * sizeof(T), &v, sizeof(T));
}

// Shortest text that reads back as `v`.
template <typename T>
std::string FormatNumber(T v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string Hex(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "0x%02X", static_cast<unsigned>(b));
  return buf;
}

// ---------------------------------------------------------------------------------------
// IDX

// Reads a file through zlib, which passes plain (non-gzip) files through unchanged.
class GzReader {
 public:
  explicit GzReader(std::string path) : path_(std::move(path)) {}
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;
  ~GzReader() {
    if (gz_ != nullptr) gzclose(gz_);
  }

  Status Open() {
    ScopedFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return Status::FromErrno("open " + path_, errno);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return Status::FromErrno("stat " + path_, errno);
    if (S_ISDIR(st.st_mode)) return Status::InvalidArgument(path_ + ": is a directory");
    gz_ = gzdopen(fd.get(), "rb");
    if (gz_ == nullptr) return Status::IOError(path_ + ": cannot start a gzip reader");
    fd.release();  // gzclose closes it now
    gzbuffer(gz_, 1 << 17);
    return Status::OK();
  }

  // Reads up to `n` bytes; fewer only at the end of the data (including a gzip stream
  // that ends early, which callers report as truncation).
  Result<uint64_t> Read(void* buf, uint64_t n) {
    uint64_t done = 0;
    while (done < n) {
      unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(n - done, uint64_t{1} << 30));
      int r = gzread(gz_, static_cast<char*>(buf) + done, chunk);
      if (r < 0) {
        int err = Z_OK;
        const char* msg = gzerror(gz_, &err);
        if (err == Z_BUF_ERROR) break;  // "unexpected end of file": a truncated gzip stream
        if (err == Z_ERRNO) return Status::FromErrno("read " + path_, errno);
        return Status::Corruption(path_ + ": damaged gzip data: " + msg);
      }
      if (r == 0) break;
      done += static_cast<uint64_t>(r);
    }
    return done;
  }

  // Reads to the end, returning how many bytes were left.
  Result<uint64_t> CountRest() {
    uint64_t total = 0;
    std::vector<char> buf(1 << 16);
    while (true) {
      COHORT_ASSIGN_OR_RETURN(uint64_t got, Read(buf.data(), buf.size()));
      total += got;
      if (got < buf.size()) return total;
    }
  }

 private:
  std::string path_;
  gzFile gz_ = nullptr;
};

Result<Dtype> IdxDtype(uint8_t type, const std::string& path) {
  switch (type) {
    case 0x08:
      return Dtype::kUint8;
    case 0x0D:
      return Dtype::kFloat32;
    default:
      break;
  }
  const char* name = nullptr;
  switch (type) {
    case 0x09:
      name = "int8";
      break;
    case 0x0B:
      name = "int16";
      break;
    case 0x0C:
      name = "int32";
      break;
    case 0x0E:
      name = "float64";
      break;
    default:
      return Status::Corruption(path + ": not an IDX file: unknown data type byte " + Hex(type));
  }
  return Status::InvalidArgument(path + ": IDX data type " + name + " (" + Hex(type) +
                                 ") is not supported (supported: uint8 0x08, float32 0x0D)");
}

// Converts big-endian 4-byte elements to host order in place.
void BigEndianToHost32(std::vector<std::byte>* data) {
  if constexpr (std::endian::native == std::endian::big) return;
  for (size_t i = 0; i + 4 <= data->size(); i += 4) {
    std::swap((*data)[i], (*data)[i + 3]);
    std::swap((*data)[i + 1], (*data)[i + 2]);
  }
}

// ---------------------------------------------------------------------------------------
// Conversions

Status NeedsRows(const HostArray& a, const std::string& what, const char* role) {
  if (a.shape.empty()) {
    return Status::InvalidArgument(what + ": " + role +
                                   " must have at least one dimension (the samples), got a "
                                   "scalar");
  }
  return Status::OK();
}

template <typename T>
void WidenToFloat32(const HostArray& a, HostArray* out) {
  const uint64_t n = a.num_elements();
  for (uint64_t i = 0; i < n; i++) StoreAt<float>(out, i, static_cast<float>(LoadAt<T>(a, i)));
}

// Any supported dtype to float32, same shape.
Result<HostArray> ConvertToFloat32(HostArray a, const std::string& what) {
  if (a.dtype == Dtype::kFloat32) return a;
  HostArray out(Dtype::kFloat32, a.shape);
  switch (a.dtype) {
    case Dtype::kUint8:
      WidenToFloat32<uint8_t>(a, &out);
      break;
    case Dtype::kInt32:
      WidenToFloat32<int32_t>(a, &out);
      break;
    case Dtype::kInt64:
      WidenToFloat32<int64_t>(a, &out);
      break;
    case Dtype::kUint64:
      WidenToFloat32<uint64_t>(a, &out);
      break;
    case Dtype::kFloat64: {
      const uint64_t n = a.num_elements();
      for (uint64_t i = 0; i < n; i++) {
        double v = LoadAt<double>(a, i);
        float f = static_cast<float>(v);
        if (std::isinf(f) && std::isfinite(v)) {
          return Status::InvalidArgument(what + ": element " + std::to_string(i) + " (" +
                                         FormatNumber(v) + ") is out of range for float32");
        }
        StoreAt<float>(&out, i, f);
      }
      break;
    }
    case Dtype::kFloat32:
      break;
  }
  return out;
}

// A float value as an int64 class label, or an error naming it.
template <typename T>
Status FloatToClass(T v, uint64_t i, const std::string& what, int64_t* out) {
  // 2^63 is exactly representable; [-2^63, 2^63) is int64's range.
  constexpr double kLimit = 9223372036854775808.0;
  const double d = static_cast<double>(v);
  if (!std::isfinite(d) || d != std::trunc(d) || d < -kLimit || d >= kLimit) {
    return Status::InvalidArgument(what + ": label " + std::to_string(i) + " is " +
                                   FormatNumber(v) +
                                   ", not an integer; class labels must be integral");
  }
  *out = static_cast<int64_t>(d);
  return Status::OK();
}

// ---------------------------------------------------------------------------------------
// CSV

// A value's text for messages: at most 40 characters.
std::string Excerpt(std::string_view s) {
  if (s.size() <= 40) return std::string(s);
  return std::string(s.substr(0, 37)) + "...";
}

std::string_view Trim(std::string_view s) {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) b++;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) e--;
  return s.substr(b, e - b);
}

bool IsBlank(std::string_view s) { return Trim(s).empty(); }

// Splits one CSV line into trimmed fields. A field may be double-quoted (the delimiter may
// then appear inside it, and "" stands for one quote); its content is returned unquoted.
// Returns false for an unterminated quote or text after a closing quote.
bool SplitFields(std::string_view line, char delim, std::vector<std::string>* fields) {
  fields->clear();
  size_t i = 0;
  while (true) {
    // One field starting at i.
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t') && line[i] != delim) i++;
    std::string field;
    if (i < line.size() && line[i] == '"') {
      i++;
      bool closed = false;
      while (i < line.size()) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field.push_back('"');
            i += 2;
            continue;
          }
          closed = true;
          i++;
          break;
        }
        field.push_back(line[i++]);
      }
      if (!closed) return false;
      while (i < line.size() && line[i] != delim) {
        if (line[i] != ' ' && line[i] != '\t') return false;
        i++;
      }
    } else {
      size_t end = line.find(delim, i);
      if (end == std::string_view::npos) end = line.size();
      field = std::string(Trim(line.substr(i, end - i)));
      i = end;
    }
    fields->push_back(std::move(field));
    if (i >= line.size()) return true;
    i++;  // the delimiter
  }
}

enum class ParseError { kOk, kEmpty, kNotNumber, kNotFinite, kOutOfRange };

// std::from_chars does not take a leading '+'; we do.
std::string_view SkipPlus(std::string_view s) {
  if (s.size() >= 2 && s[0] == '+' && s[1] != '-' && s[1] != '+') return s.substr(1);
  return s;
}

// Parses a decimal float32 (std::from_chars: locale-free, correctly rounded).
ParseError ParseFloat32(std::string_view text, float* out) {
  if (text.empty()) return ParseError::kEmpty;
  std::string_view s = SkipPlus(text);
  float v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::general);
  if (r.ec == std::errc::invalid_argument || r.ptr != s.data() + s.size()) {
    return ParseError::kNotNumber;
  }
  if (r.ec == std::errc::result_out_of_range) {
    // Overflow is an error; underflow rounds to zero or a subnormal, as numpy does.
    float f = std::strtof(std::string(s).c_str(), nullptr);
    if (std::isinf(f)) return ParseError::kOutOfRange;
    v = f;
  }
  *out = v;  // also when not finite: the caller may accept that
  if (!std::isfinite(v)) return ParseError::kNotFinite;
  return ParseError::kOk;
}

struct LabelValue {
  double value = 0;
  bool whole = false;     // a whole number (1e23 is one)
  bool integral = false;  // a whole number that fits in int64
  int64_t integer = 0;
};

ParseError ParseLabel(std::string_view text, LabelValue* out) {
  if (text.empty()) return ParseError::kEmpty;
  std::string_view s = SkipPlus(text);
  const char* end = s.data() + s.size();
  int64_t i = 0;
  auto ri = std::from_chars(s.data(), end, i);
  if (ri.ec == std::errc() && ri.ptr == end) {
    *out = {static_cast<double>(i), true, true, i};
    return ParseError::kOk;
  }
  double d = 0;
  auto r = std::from_chars(s.data(), end, d, std::chars_format::general);
  if (r.ec == std::errc::invalid_argument || r.ptr != end) return ParseError::kNotNumber;
  if (r.ec == std::errc::result_out_of_range) {
    d = std::strtod(std::string(s).c_str(), nullptr);
    if (std::isinf(d)) return ParseError::kOutOfRange;
  }
  if (!std::isfinite(d)) return ParseError::kNotFinite;
  constexpr double kLimit = 9223372036854775808.0;
  out->value = d;
  out->whole = d == std::trunc(d);
  out->integral = out->whole && d >= -kLimit && d < kLimit;
  out->integer = out->integral ? static_cast<int64_t>(d) : 0;
  return ParseError::kOk;
}

Status ValueError(const std::string& where, const std::string& column, std::string_view text,
                  ParseError err) {
  std::string head = where + ": column '" + column + "': ";
  switch (err) {
    case ParseError::kEmpty:
      return Status::InvalidArgument(head + "empty value");
    case ParseError::kNotNumber:
      return Status::InvalidArgument(head + "'" + Excerpt(text) + "' is not a number");
    case ParseError::kNotFinite:
      return Status::InvalidArgument(head + "'" + Excerpt(text) + "' is not a finite number");
    case ParseError::kOutOfRange:
      return Status::InvalidArgument(head + "'" + Excerpt(text) + "' is out of range for float32");
    case ParseError::kOk:
      break;
  }
  return Status::OK();
}

// Every column, so that the right one is in the list however wide the header is.
std::string ListColumns(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); i++) {
    if (i > 0) s += ", ";
    s += '\'';
    s += Excerpt(names[i]);
    s += '\'';
  }
  return s;
}

// The steps of ReadCsvDataset, in its order: options, lines, header and columns, rows, arrays.

Status CheckCsvOptions(const std::string& path, const CsvOptions& options) {
  const char delim = options.delimiter;
  if (delim == '"' || delim == '\n' || delim == '\r' || delim == '\0') {
    return Status::InvalidArgument(path + ": unusable CSV delimiter " +
                                   Hex(static_cast<uint8_t>(delim)));
  }
  if (options.label_column.empty()) {
    return Status::InvalidArgument(path + ": no label column name given");
  }
  return Status::OK();
}

// The non-blank lines of a CSV text without their line ends, numbered for messages. A UTF-8
// byte-order mark before the first line is skipped.
class CsvLines {
 public:
  CsvLines(const std::string& path, std::string_view text) : path_(path), text_(text) {
    if (text_.starts_with("\xEF\xBB\xBF")) text_.remove_prefix(3);
  }

  bool Next(std::string_view* line) {
    while (pos_ < text_.size()) {
      size_t nl = text_.find('\n', pos_);
      if (nl == std::string_view::npos) nl = text_.size();
      std::string_view l = text_.substr(pos_, nl - pos_);
      pos_ = nl + 1;
      line_no_++;
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      if (!IsBlank(l)) {
        *line = l;
        return true;
      }
    }
    return false;
  }

  // "data.csv:12", naming the line Next() returned last.
  std::string Where() const { return path_ + ":" + std::to_string(line_no_); }
  uint64_t line() const { return line_no_; }

 private:
  const std::string& path_;
  std::string_view text_;
  size_t pos_ = 0;
  uint64_t line_no_ = 0;
};

// The header's column names and which of them is the label; every other column is a feature.
struct CsvColumns {
  std::vector<std::string> names;
  size_t label = 0;
  uint64_t features() const { return names.size() - 1; }
};

// The one column named `label_column`; there must be a feature column besides it.
Result<size_t> FindLabelColumn(const std::vector<std::string>& names,
                               const std::string& label_column, const std::string& path) {
  size_t label = names.size();
  size_t matches = 0;
  for (size_t c = 0; c < names.size(); c++) {
    if (names[c] == label_column) {
      label = c;
      matches++;
    }
  }
  if (matches == 0) {
    std::string closest = ClosestName(label_column, names);
    return Status::InvalidArgument(path + ": no column named '" + label_column + "'" +
                                   (closest.empty() ? "" : "; did you mean '" + closest + "'?") +
                                   " (columns: " + ListColumns(names) + ")");
  }
  if (matches > 1) {
    return Status::InvalidArgument(path + ": column name '" + label_column + "' appears " +
                                   std::to_string(matches) + " times in the header");
  }
  if (names.size() < 2) {
    return Status::InvalidArgument(path + ": no feature columns besides the label column '" +
                                   label_column + "'");
  }
  return label;
}

Result<CsvColumns> ReadCsvHeader(CsvLines* lines, const std::string& path,
                                 const CsvOptions& options) {
  std::string_view line;
  if (!lines->Next(&line)) {
    return Status::InvalidArgument(path +
                                   ": empty file, expected a header line naming the "
                                   "columns");
  }
  CsvColumns columns;
  if (!SplitFields(line, options.delimiter, &columns.names)) {
    return Status::InvalidArgument(lines->Where() +
                                   ": header: unterminated or malformed quoted name");
  }
  COHORT_ASSIGN_OR_RETURN(columns.label,
                          FindLabelColumn(columns.names, options.label_column, path));
  return columns;
}

// The parsed values of the data rows so far.
struct CsvValues {
  std::vector<float> features;  // row after row, CsvColumns::features() per row
  std::vector<LabelValue> labels;
  std::vector<uint64_t> lines;  // each row's line in the file, for messages
};

// One label value: any finite number, integral for classes; a non-integral one must fit in
// float32, the type vector labels are stored as.
Status ParseCsvLabel(std::string_view text, const std::string& column, CsvOptions::LabelType type,
                     const CsvLines& lines, LabelValue* out) {
  ParseError err = ParseLabel(text, out);
  if (err != ParseError::kOk) return ValueError(lines.Where(), column, text, err);
  if (type == CsvOptions::LabelType::kClass && !out->whole) {
    return Status::InvalidArgument(lines.Where() + ": column '" + column + "': '" + Excerpt(text) +
                                   "' is not an integer; class labels must be integral");
  }
  if (type != CsvOptions::LabelType::kClass && !out->whole &&
      std::isinf(static_cast<float>(out->value))) {
    return ValueError(lines.Where(), column, text, ParseError::kOutOfRange);
  }
  return Status::OK();
}

// Adds one data row, already split into `fields`, to `values`.
Status AddCsvRow(const std::vector<std::string>& fields, const CsvColumns& columns,
                 const CsvOptions& options, const CsvLines& lines, CsvValues* values) {
  const CsvOptions::LabelType type = options.label_type;
  const size_t ncols = columns.names.size();
  if (fields.size() != ncols) {
    return Status::InvalidArgument(lines.Where() + ": expected " + std::to_string(ncols) +
                                   " fields, found " + std::to_string(fields.size()));
  }
  for (size_t c = 0; c < ncols; c++) {
    if (c == columns.label) {
      LabelValue v;
      COHORT_RETURN_IF_ERROR(ParseCsvLabel(fields[c], columns.names[c], type, lines, &v));
      values->labels.push_back(v);
    } else {
      float f = 0;
      ParseError err = ParseFloat32(fields[c], &f);
      if (err == ParseError::kNotFinite && options.allow_non_finite) err = ParseError::kOk;
      if (err != ParseError::kOk)
        return ValueError(lines.Where(), columns.names[c], fields[c], err);
      values->features.push_back(f);
    }
  }
  values->lines.push_back(lines.line());
  return Status::OK();
}

// Float32 features of shape (rows, feature columns).
HostArray CsvFeatureArray(const CsvValues& values, const CsvColumns& columns) {
  HostArray x(Dtype::kFloat32, {values.labels.size(), columns.features()});
  if (!values.features.empty()) {
    std::memcpy(x.data.data(), values.features.data(), values.features.size() * sizeof(float));
  }
  return x;
}

// The valid range of class labels, "[0, 10)", for messages.
std::string ClassRange(int64_t classes) {
  if (classes > 0) return "[0, " + std::to_string(classes) + ")";
  return "[0, 100000)";
}

// Every label a valid class, or an error naming the lines at fault (at most 5) and the count.
Status CheckCsvClasses(const CsvValues& values, const std::string& path, const std::string& column,
                       int64_t classes) {
  const int64_t limit = classes > 0 ? classes : kMaxClasses;
  std::string shown;
  uint64_t bad = 0;
  for (size_t i = 0; i < values.labels.size(); i++) {
    const LabelValue& v = values.labels[i];
    if (v.integral && v.integer >= 0 && v.integer < limit) continue;
    if (++bad <= 5) {
      shown += (bad > 1 ? ", " : "") + std::string("line ") + std::to_string(values.lines[i]) +
               ": " + (v.integral ? std::to_string(v.integer) : FormatNumber(v.value));
    }
  }
  if (bad == 0) return Status::OK();
  return Status::InvalidArgument(path + ": column '" + column + "': class labels must be in " +
                                 ClassRange(classes) + "; " + shown +
                                 (bad > 5 ? ", ... (" + std::to_string(bad) + " rows)" : ""));
}

// Whether the labels become classes: kAuto picks classes when every value is a whole
// number (so one label of 1e23 among classes is refused as a class, not read as a target).
bool CsvLabelsAreClasses(const std::vector<LabelValue>& labels, CsvOptions::LabelType type) {
  if (type != CsvOptions::LabelType::kAuto) return type == CsvOptions::LabelType::kClass;
  return std::all_of(labels.begin(), labels.end(), [](const LabelValue& v) { return v.whole; });
}

// Int64 classes of shape (n,) (checked by CheckCsvClasses first), or float32 targets of
// shape (n, 1).
HostArray CsvLabelArray(const std::vector<LabelValue>& labels, bool classes) {
  const uint64_t n = labels.size();
  if (classes) {
    HostArray y(Dtype::kInt64, {n});
    for (uint64_t i = 0; i < n; i++) StoreAt<int64_t>(&y, i, labels[i].integer);
    return y;
  }
  HostArray y(Dtype::kFloat32, {n, 1});
  for (uint64_t i = 0; i < n; i++) {
    // Non-integral values were range-checked while parsing.
    const LabelValue& v = labels[i];
    StoreAt<float>(&y, i, v.integral ? static_cast<float>(v.integer) : static_cast<float>(v.value));
  }
  return y;
}

}  // namespace

// -----------------------------------------------------------------------------------------

Result<HostArray> ReadIdxFile(const std::string& path) {
  GzReader in(path);
  COHORT_RETURN_IF_ERROR(in.Open());
  auto bad = [&](const std::string& why) {
    return Status::Corruption(path + ": not an IDX file: " + why);
  };

  uint8_t magic[4] = {};
  COHORT_ASSIGN_OR_RETURN(uint64_t got, in.Read(magic, sizeof(magic)));
  if (got < sizeof(magic)) {
    return bad("only " + std::to_string(got) + " bytes, shorter than the 4-byte magic");
  }
  if (magic[0] != 0 || magic[1] != 0) {
    return bad("bad magic " + Hex(magic[0]) + " " + Hex(magic[1]) + " " + Hex(magic[2]) + " " +
               Hex(magic[3]) + " (expected 0x00 0x00 <type> <dimensions>)");
  }
  COHORT_ASSIGN_OR_RETURN(Dtype dtype, IdxDtype(magic[2], path));
  const size_t ndims = magic[3];
  if (ndims == 0) return bad("zero dimensions");

  std::vector<uint8_t> raw(size_t{4} * ndims);
  COHORT_ASSIGN_OR_RETURN(got, in.Read(raw.data(), raw.size()));
  if (got < raw.size()) {
    return Status::Corruption(path + ": truncated IDX header: " + std::to_string(ndims) +
                              " dimensions need " + std::to_string(raw.size()) + " bytes, found " +
                              std::to_string(got));
  }
  std::vector<uint64_t> shape(ndims);
  for (size_t i = 0; i < ndims; i++) {
    shape[i] = (uint64_t{raw[4 * i]} << 24) | (uint64_t{raw[4 * i + 1]} << 16) |
               (uint64_t{raw[4 * i + 2]} << 8) | uint64_t{raw[4 * i + 3]};
  }
  uint64_t bytes = 0;
  if (!CheckedBytes(shape, DtypeSize(dtype), &bytes) || bytes > kMaxIdxBytes) {
    return Status::Corruption(path + ": IDX dimensions " + ShapeToString(shape) +
                              " describe more than 2^40 bytes of " + DtypeName(dtype) + " data");
  }

  // Grow the buffer as data arrives rather than trusting the header: a damaged header
  // must not make us allocate a terabyte before noticing the file is short. The first chunk
  // is small too (a 20-byte file once cost a zeroed 64 MiB buffer, and fuzz/idx_fuzz.cc ran
  // at ~50 inputs/s); doubling reaches Fashion-MNIST's 47 MB in 7 steps.
  HostArray out;
  out.dtype = dtype;
  out.shape = shape;
  constexpr uint64_t kMinChunk = uint64_t{1} << 20;
  got = 0;
  while (got < bytes) {
    const uint64_t size = std::min(bytes, std::max(kMinChunk, 2 * got));
    out.data.resize(size);
    COHORT_ASSIGN_OR_RETURN(uint64_t n, in.Read(out.data.data() + got, size - got));
    got += n;
    if (got < size) break;
  }
  if (got < bytes) {
    return Status::Corruption(path + ": truncated IDX file: dimensions " + ShapeToString(shape) +
                              " promise " + std::to_string(bytes) + " data bytes, found " +
                              std::to_string(got));
  }
  COHORT_ASSIGN_OR_RETURN(uint64_t rest, in.CountRest());
  if (rest > 0) {
    return Status::Corruption(path + ": " + std::to_string(rest) +
                              " bytes of trailing data after the " + std::to_string(bytes) +
                              " data bytes that dimensions " + ShapeToString(shape) + " promise");
  }
  if (dtype == Dtype::kFloat32) BigEndianToHost32(&out.data);
  return out;
}

Result<std::pair<HostArray, HostArray>> ReadIdxDataset(const std::string& images,
                                                       const std::string& labels, int64_t classes) {
  COHORT_ASSIGN_OR_RETURN(HostArray x, ReadIdxFile(images));
  COHORT_ASSIGN_OR_RETURN(HostArray y, ReadIdxFile(labels));
  COHORT_ASSIGN_OR_RETURN(y, ToClassLabels(std::move(y), labels));
  COHORT_RETURN_IF_ERROR(CheckClassLabels(y, classes, labels));
  if (x.rows() != y.rows()) {
    return Status::InvalidArgument(images + " has " + std::to_string(x.rows()) + " samples but " +
                                   labels + " has " + std::to_string(y.rows()) + " labels");
  }
  return std::make_pair(std::move(x), std::move(y));
}

Status WriteNpyFile(const std::string& path, const HostArray& array) {
  COHORT_RETURN_IF_ERROR(CheckConsistent(array, path));
  const std::string header = EncodeNpyHeader(array.dtype, array.shape);
  // A v1.0 header's length field is 16 bits.
  if (header.size() - 10 > std::numeric_limits<uint16_t>::max()) {
    return Status::InvalidArgument(path + ": shape " + ShapeToString(array.shape) +
                                   " is too long for a .npy version 1.0 header");
  }
  return WriteFileAtomically(
      path, {std::as_bytes(std::span<const char>(header.data(), header.size())), array.data});
}

Status CheckClassLabels(const HostArray& labels, int64_t classes, const std::string& what) {
  if (labels.dtype != Dtype::kInt64 || labels.shape.size() != 1) {
    return Status::InvalidArgument(what + ": class labels must be int64 of shape (n,), not " +
                                   std::string(DtypeName(labels.dtype)) +
                                   ShapeToString(labels.shape));
  }
  const int64_t limit = classes > 0 ? classes : kMaxClasses;
  std::string shown;
  uint64_t bad = 0;
  for (uint64_t i = 0; i < labels.rows(); i++) {
    const int64_t v = LoadAt<int64_t>(labels, i);
    if (v >= 0 && v < limit) continue;
    if (++bad <= 5) {
      shown += (bad > 1 ? ", " : "") + std::string("row ") + std::to_string(i) + ": " +
               std::to_string(v);
    }
  }
  if (bad == 0) return Status::OK();
  return Status::InvalidArgument(what + ": class labels must be in " + ClassRange(classes) + "; " +
                                 shown +
                                 (bad > 5 ? ", ... (" + std::to_string(bad) + " rows)" : ""));
}

Status CheckFinite(const HostArray& values, const std::string& what, const char* role) {
  if (values.dtype != Dtype::kFloat32 || values.shape.empty()) return Status::OK();
  const uint64_t rows = values.rows();
  const uint64_t per_row = rows == 0 ? 0 : values.num_elements() / rows;
  std::string shown;
  uint64_t bad = 0;
  for (uint64_t r = 0; r < rows; r++) {
    for (uint64_t k = 0; k < per_row; k++) {
      const float v = LoadAt<float>(values, r * per_row + k);
      if (std::isfinite(v)) continue;
      if (++bad <= 5) {
        shown += (bad > 1 ? ", " : "") + std::string("row ") + std::to_string(r) + " (" +
                 (std::isnan(v) ? "nan"
                  : v > 0       ? "inf"
                                : "-inf") +
                 ")";
      }
      break;
    }
  }
  if (bad == 0) return Status::OK();
  return Status::InvalidArgument(what + ": " + role + " must be finite numbers; " + shown +
                                 (bad > 5 ? ", ... (" + std::to_string(bad) + " rows)" : ""));
}

Result<HostArray> ToStoreFeatures(HostArray a, const std::string& what) {
  COHORT_RETURN_IF_ERROR(CheckConsistent(a, what));
  COHORT_RETURN_IF_ERROR(NeedsRows(a, what, "features"));
  if (a.dtype == Dtype::kUint8 || a.dtype == Dtype::kFloat32) return a;
  return ConvertToFloat32(std::move(a), what);
}

Result<HostArray> ToClassLabels(HostArray a, const std::string& what) {
  COHORT_RETURN_IF_ERROR(CheckConsistent(a, what));
  const bool column = a.shape.size() == 2 && a.shape[1] == 1;
  if (a.shape.size() != 1 && !column) {
    return Status::InvalidArgument(what + ": class labels must have shape (n,) or (n, 1), not " +
                                   ShapeToString(a.shape));
  }
  const uint64_t n = a.shape[0];
  if (a.dtype == Dtype::kInt64) {
    a.shape = {n};
    return a;
  }
  HostArray out(Dtype::kInt64, {n});
  for (uint64_t i = 0; i < n; i++) {
    int64_t v = 0;
    switch (a.dtype) {
      case Dtype::kUint8:
        v = LoadAt<uint8_t>(a, i);
        break;
      case Dtype::kInt32:
        v = LoadAt<int32_t>(a, i);
        break;
      case Dtype::kInt64:
        v = LoadAt<int64_t>(a, i);
        break;
      case Dtype::kUint64: {
        uint64_t u = LoadAt<uint64_t>(a, i);
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return Status::InvalidArgument(what + ": label " + std::to_string(i) + " is " +
                                         std::to_string(u) + ", beyond the int64 range");
        }
        v = static_cast<int64_t>(u);
        break;
      }
      case Dtype::kFloat32:
        COHORT_RETURN_IF_ERROR(FloatToClass(LoadAt<float>(a, i), i, what, &v));
        break;
      case Dtype::kFloat64:
        COHORT_RETURN_IF_ERROR(FloatToClass(LoadAt<double>(a, i), i, what, &v));
        break;
    }
    StoreAt<int64_t>(&out, i, v);
  }
  return out;
}

Result<HostArray> ToVectorLabels(HostArray a, const std::string& what) {
  COHORT_RETURN_IF_ERROR(CheckConsistent(a, what));
  COHORT_RETURN_IF_ERROR(NeedsRows(a, what, "vector labels"));
  COHORT_ASSIGN_OR_RETURN(HostArray out, ConvertToFloat32(std::move(a), what));
  if (out.shape.size() == 1) out.shape.push_back(1);
  return out;
}

Result<std::pair<HostArray, HostArray>> ReadCsvDataset(const std::string& path,
                                                       const CsvOptions& options) {
  COHORT_RETURN_IF_ERROR(CheckCsvOptions(path, options));
  COHORT_ASSIGN_OR_RETURN(std::string content, ReadFileToString(path));
  CsvLines lines(path, content);
  COHORT_ASSIGN_OR_RETURN(CsvColumns columns, ReadCsvHeader(&lines, path, options));
  CsvValues values;
  std::vector<std::string> fields;  // reused across rows
  std::string_view line;
  while (lines.Next(&line)) {
    if (!SplitFields(line, options.delimiter, &fields)) {
      return Status::InvalidArgument(lines.Where() + ": unterminated or malformed quoted field");
    }
    COHORT_RETURN_IF_ERROR(AddCsvRow(fields, columns, options, lines, &values));
  }
  if (values.labels.empty()) {
    return Status::InvalidArgument(path + ": no data rows after the header");
  }
  const bool classes = CsvLabelsAreClasses(values.labels, options.label_type);
  if (classes) {
    COHORT_RETURN_IF_ERROR(
        CheckCsvClasses(values, path, columns.names[columns.label], options.classes));
  }
  return std::make_pair(CsvFeatureArray(values, columns), CsvLabelArray(values.labels, classes));
}

}  // namespace cohort::store
