#include "io/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

namespace uniprefill::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxNesting = 8;           // arrays of arrays of ... deeper than this are rejected
constexpr uint64_t kMaxTensorName = 4096;
constexpr int kMaxTensorDims = 4;
// Smallest encodings, used to bound counts by the bytes left before anything is allocated.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, one-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim, type, offset

// Bytes of a scalar value type in the file; 0 for string/array/unknown.
size_t ScalarSize(ValueType t) {
  switch (t) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
    case ValueType::kU16: case ValueType::kI16: return 2;
    case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
    case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: return 8;
    default: return 0;
  }
}

bool IsKnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::kF64); }

// Smallest number of bytes one element of type `t` occupies in the file.
uint64_t MinElementBytes(ValueType t) {
  if (t == ValueType::kString) return 8;
  if (t == ValueType::kArray) return 4 + 8;
  return ScalarSize(t);
}

std::string ArrayDescription(ValueType t, uint64_t count) {
  std::string type = t == ValueType::kString ? "string" : ValueTypeName(t);
  return "array of " + std::to_string(count) + " " + type + (count == 1 ? "" : "s");
}

// A bounds-checked little-endian cursor over the file. Every read says what it was reading, so a
// failure can name it; `context` names the enclosing item (a metadata key, a tensor).
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& path)
      : data_(data), size_(size), path_(path) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  void set_context(std::string c) { context_ = std::move(c); }

  Status Error(const std::string& what) const {
    return DataLoss("GGUF " + path_ + ": " + what);
  }
  // "truncated while reading <context> <what> at byte P (file is N bytes)".
  Status Truncated(const std::string& what) const {
    std::string where = context_.empty() ? what : context_ + " " + what;
    return Error("truncated while reading " + where + " at byte " + std::to_string(pos_) +
                 " (file is " + std::to_string(size_) + " bytes)");
  }

  template <typename T>
  Status Read(T* out, const char* what) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (remaining() < sizeof(T)) return Truncated(what);
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return OkStatus();
  }

  // A gguf string: u64 length then bytes. The length is checked against the bytes left before the
  // string is allocated.
  Status ReadString(std::string* out, const char* what, uint64_t max_len = UINT64_MAX) {
    const size_t start = pos_;
    uint64_t len = 0;
    UP_RETURN_IF_ERROR(Read(&len, what));
    if (len > max_len) {
      pos_ = start;
      return Error(context_ + " " + what + " at byte " + std::to_string(start) + " is " +
                   std::to_string(len) + " bytes long (limit " + std::to_string(max_len) + ")");
    }
    if (len > remaining()) {
      return Truncated(std::string(what) + " of " + std::to_string(len) + " bytes");
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return OkStatus();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
  std::string context_;
};

template <typename T, typename Wide>
Status ReadScalarAs(Reader& r, Value* v, const char* what) {
  T x{};
  UP_RETURN_IF_ERROR(r.Read(&x, what));
  v->data = static_cast<Wide>(x);
  return OkStatus();
}

Status ReadValue(Reader& r, ValueType type, int depth, Value* v);

Status ReadArray(Reader& r, int depth, Array* a) {
  if (depth >= kMaxNesting) {
    return r.Error("arrays nested deeper than " + std::to_string(kMaxNesting) + " levels at byte " +
                   std::to_string(r.pos()));
  }
  uint32_t elem_type = 0;
  UP_RETURN_IF_ERROR(r.Read(&elem_type, "array element type"));
  if (!IsKnownValueType(elem_type)) {
    return r.Error("unknown array element type " + std::to_string(elem_type) + " at byte " +
                   std::to_string(r.pos() - 4));
  }
  a->element_type = static_cast<ValueType>(elem_type);
  uint64_t count = 0;
  UP_RETURN_IF_ERROR(r.Read(&count, "array count"));
  // Every element takes at least MinElementBytes, so a count that cannot fit fails here, before
  // the vector is sized.
  if (count > r.remaining() / MinElementBytes(a->element_type)) {
    return r.Truncated(ArrayDescription(a->element_type, count));
  }
  a->elements.resize(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    Status st = ReadValue(r, a->element_type, depth + 1, &a->elements[i]);
    if (!st.ok()) {
      if (st.message().find("truncated") == std::string::npos) return st;
      return r.Truncated(ArrayDescription(a->element_type, count) + " (element " +
                         std::to_string(i) + ")");
    }
  }
  return OkStatus();
}

Status ReadValue(Reader& r, ValueType type, int depth, Value* v) {
  v->type = type;
  switch (type) {
    case ValueType::kU8: return ReadScalarAs<uint8_t, uint64_t>(r, v, "u8 value");
    case ValueType::kI8: return ReadScalarAs<int8_t, int64_t>(r, v, "i8 value");
    case ValueType::kU16: return ReadScalarAs<uint16_t, uint64_t>(r, v, "u16 value");
    case ValueType::kI16: return ReadScalarAs<int16_t, int64_t>(r, v, "i16 value");
    case ValueType::kU32: return ReadScalarAs<uint32_t, uint64_t>(r, v, "u32 value");
    case ValueType::kI32: return ReadScalarAs<int32_t, int64_t>(r, v, "i32 value");
    case ValueType::kU64: return ReadScalarAs<uint64_t, uint64_t>(r, v, "u64 value");
    case ValueType::kI64: return ReadScalarAs<int64_t, int64_t>(r, v, "i64 value");
    case ValueType::kF32: return ReadScalarAs<float, double>(r, v, "f32 value");
    case ValueType::kF64: return ReadScalarAs<double, double>(r, v, "f64 value");
    case ValueType::kBool: {
      uint8_t b = 0;
      UP_RETURN_IF_ERROR(r.Read(&b, "bool value"));
      if (b > 1) {
        return r.Error("bool value " + std::to_string(b) + " at byte " +
                       std::to_string(r.pos() - 1) + " is neither 0 nor 1");
      }
      v->data = b == 1;
      return OkStatus();
    }
    case ValueType::kString: {
      std::string s;
      UP_RETURN_IF_ERROR(r.ReadString(&s, "string value"));
      v->data = std::move(s);
      return OkStatus();
    }
    case ValueType::kArray: {
      Array a;
      UP_RETURN_IF_ERROR(ReadArray(r, depth, &a));
      v->data = std::move(a);
      return OkStatus();
    }
  }
  return r.Error("unknown value type " + std::to_string(static_cast<uint32_t>(type)));
}

std::string Quote(std::string_view s) {
  constexpr size_t kMax = 80;
  std::string out = "'";
  out.append(s.substr(0, kMax));
  if (s.size() > kMax) out += "...";
  return out + "'";
}

}  // namespace

const char* ValueTypeName(ValueType t) {
  switch (t) {
    case ValueType::kU8: return "u8";
    case ValueType::kI8: return "i8";
    case ValueType::kU16: return "u16";
    case ValueType::kI16: return "i16";
    case ValueType::kU32: return "u32";
    case ValueType::kI32: return "i32";
    case ValueType::kF32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kU64: return "u64";
    case ValueType::kI64: return "i64";
    case ValueType::kF64: return "f64";
  }
  return "unknown";
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

TensorView TensorInfo::View() const {
  TensorView v;
  v.data = const_cast<uint8_t*>(data);
  v.dtype = type;
  v.device = Device::kCpu;
  v.ndim = static_cast<int>(dims.size());
  for (int i = 0; i < v.ndim; ++i) v.shape[i] = dims[v.ndim - 1 - i];
  int64_t st = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.stride[i] = st;
    st *= v.shape[i];
  }
  return v;
}

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return NotFound("GGUF " + path + ": cannot open (" + std::strerror(errno) + ")");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return NotFound("GGUF " + path + ": cannot stat (" + std::strerror(err) + ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return NotFound("GGUF " + path + ": not a regular file");
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return NotFound("GGUF " + path + ": cannot mmap " + std::to_string(f->size_) + " bytes (" +
                      std::strerror(err) + ")");
    }
    f->base_ = static_cast<const uint8_t*>(p);
    f->mapped_ = true;
  }
  ::close(fd);  // the mapping stays valid
  UP_RETURN_IF_ERROR(f->Parse());
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::FromMemory(const uint8_t* data, size_t size) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = "<memory>";
  f->owned_.assign(data, data + size);
  f->base_ = f->owned_.data();
  f->size_ = size;
  UP_RETURN_IF_ERROR(f->Parse());
  return f;
}

GgufFile::~GgufFile() {
  if (mapped_ && base_ != nullptr) ::munmap(const_cast<uint8_t*>(base_), size_);
}

Status GgufFile::Parse() {
  Reader r(base_, size_, path_);
  r.set_context("header");
  uint32_t magic = 0;
  if (size_ < 4) {
    return r.Error("not a GGUF file (" + std::to_string(size_) + " bytes, shorter than the magic)");
  }
  UP_RETURN_IF_ERROR(r.Read(&magic, "magic"));
  if (magic != kMagic) {
    std::string m;
    for (int i = 0; i < 4; ++i) {
      const char c = static_cast<char>(base_[i]);
      m += (c >= 0x20 && c < 0x7f) ? std::string(1, c) : "\\x" + std::to_string(base_[i]);
    }
    return r.Error("not a GGUF file (magic '" + m + "', expected 'GGUF')");
  }
  UP_RETURN_IF_ERROR(r.Read(&version_, "version"));
  if (version_ != 2 && version_ != 3) {
    const bool byte_swapped = version_ != 0 && (version_ & 0xFFFF) == 0;
    std::string hint =
        version_ == 1  ? " (GGUF v1 is obsolete; re-convert the model)"
        : byte_swapped ? " (looks byte-swapped: big-endian GGUF files are not supported)"
                       : "";
    return Unimplemented("GGUF " + path_ + ": unsupported version " + std::to_string(version_) +
                         ", expected 2 or 3" + hint);
  }
  uint64_t n_tensors = 0, n_kv = 0;
  UP_RETURN_IF_ERROR(r.Read(&n_tensors, "tensor count"));
  UP_RETURN_IF_ERROR(r.Read(&n_kv, "metadata count"));
  if (n_kv > r.remaining() / kMinKvBytes) {
    return r.Truncated(std::to_string(n_kv) + " metadata entries");
  }
  if (n_tensors > r.remaining() / kMinTensorInfoBytes) {
    return r.Truncated(std::to_string(n_tensors) + " tensor infos");
  }

  metadata_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    r.set_context("metadata key #" + std::to_string(i));
    std::string key;
    UP_RETURN_IF_ERROR(r.ReadString(&key, "key"));
    r.set_context("metadata key #" + std::to_string(i) + " (" + Quote(key) + ")");
    uint32_t type = 0;
    UP_RETURN_IF_ERROR(r.Read(&type, "value type"));
    if (!IsKnownValueType(type)) {
      return r.Error("metadata key #" + std::to_string(i) + " (" + Quote(key) +
                     ") has unknown value type " + std::to_string(type) + " at byte " +
                     std::to_string(r.pos() - 4));
    }
    Value v;
    UP_RETURN_IF_ERROR(ReadValue(r, static_cast<ValueType>(type), 0, &v));
    if (!metadata_index_.emplace(key, metadata_.size()).second) {
      return r.Error("duplicate metadata key " + Quote(key));
    }
    metadata_.emplace_back(std::move(key), std::move(v));
  }

  if (const Value* a = Find("general.alignment")) {
    if (a->type != ValueType::kU32) {
      return r.Error(std::string("general.alignment has type ") + ValueTypeName(a->type) +
                     ", expected u32");
    }
    const uint64_t al = std::get<uint64_t>(a->data);
    if (al == 0 || (al & (al - 1)) != 0) {
      return r.Error("general.alignment " + std::to_string(al) + " is not a power of two");
    }
    alignment_ = static_cast<uint32_t>(al);
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    r.set_context("tensor info #" + std::to_string(i));
    TensorInfo t;
    UP_RETURN_IF_ERROR(r.ReadString(&t.name, "name", kMaxTensorName));
    const std::string what = "tensor #" + std::to_string(i) + " (" + Quote(t.name) + ")";
    r.set_context("tensor info #" + std::to_string(i) + " (" + Quote(t.name) + ")");
    uint32_t n_dims = 0;
    UP_RETURN_IF_ERROR(r.Read(&n_dims, "n_dims"));
    if (n_dims < 1 || n_dims > kMaxTensorDims) {
      return r.Error(what + " has " + std::to_string(n_dims) + " dimensions (expected 1.." +
                     std::to_string(kMaxTensorDims) + ")");
    }
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      UP_RETURN_IF_ERROR(r.Read(&dim, "dimension"));
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(numel, static_cast<int64_t>(dim), &numel)) {
        return r.Error(what + " has invalid dimension " + std::to_string(d) + " = " +
                       std::to_string(dim) + " (must be > 0 with a total element count < 2^63)");
      }
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    uint32_t type = 0;
    UP_RETURN_IF_ERROR(r.Read(&type, "type"));
    const std::optional<DTypeInfo> info = type < 1000 ? GetDTypeInfo(type) : std::nullopt;
    if (!info) {
      return Unimplemented("GGUF " + path_ + ": " + what + " has tensor type id " +
                           std::to_string(type) + ", which this engine does not support");
    }
    t.type = static_cast<DType>(type);
    if (t.dims[0] % info->block_elems != 0) {
      return r.Error(what + " of type " + info->name + " has dims[0] = " +
                     std::to_string(t.dims[0]) + ", not a multiple of the block size " +
                     std::to_string(info->block_elems));
    }
    int64_t n_bytes = 0;
    if (__builtin_mul_overflow(numel / info->block_elems, info->block_bytes, &n_bytes)) {
      return r.Error(what + " is too large (" + std::to_string(numel) + " elements)");
    }
    t.n_bytes = static_cast<uint64_t>(n_bytes);
    UP_RETURN_IF_ERROR(r.Read(&t.offset, "offset"));
    if (t.offset % alignment_ != 0) {
      return r.Error(what + " has offset " + std::to_string(t.offset) +
                     ", not a multiple of the alignment " + std::to_string(alignment_));
    }
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      return r.Error("duplicate tensor name " + Quote(t.name) + " (tensor #" + std::to_string(i) +
                     ")");
    }
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment after the tensor infos.
  const uint64_t data_start = (static_cast<uint64_t>(r.pos()) + alignment_ - 1) /
                              alignment_ * alignment_;
  for (TensorInfo& t : tensors_) {
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(data_start, t.offset, &begin) ||
        __builtin_add_overflow(begin, t.n_bytes, &end) || end > size_) {
      return DataLoss("GGUF " + path_ + ": tensor " + Quote(t.name) + " data [" +
                      std::to_string(data_start) + " + " + std::to_string(t.offset) + ", +" +
                      std::to_string(t.n_bytes) + " bytes) runs past the end of the file (" +
                      std::to_string(size_) + " bytes)");
    }
    t.data = base_ + begin;
  }
  return OkStatus();
}

const Value* GgufFile::Find(std::string_view key) const {
  auto it = metadata_index_.find(std::string(key));
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const TensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

// ---- Typed getters -------------------------------------------------------------------------

namespace {

bool IsUnsigned(ValueType t) {
  return t == ValueType::kU8 || t == ValueType::kU16 || t == ValueType::kU32 ||
         t == ValueType::kU64;
}
bool IsSigned(ValueType t) {
  return t == ValueType::kI8 || t == ValueType::kI16 || t == ValueType::kI32 ||
         t == ValueType::kI64;
}
bool IsFloat(ValueType t) { return t == ValueType::kF32 || t == ValueType::kF64; }

std::optional<int64_t> AsInt(const Value& v) {
  if (IsSigned(v.type)) return std::get<int64_t>(v.data);
  if (IsUnsigned(v.type)) {
    const uint64_t u = std::get<uint64_t>(v.data);
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  return std::nullopt;
}

std::optional<double> AsFloat(const Value& v) {
  if (IsFloat(v.type)) return std::get<double>(v.data);
  if (IsSigned(v.type)) return static_cast<double>(std::get<int64_t>(v.data));
  if (IsUnsigned(v.type)) return static_cast<double>(std::get<uint64_t>(v.data));
  return std::nullopt;
}

}  // namespace

#define UP_GGUF_LOOKUP(v, key)                                                     \
  const Value* v = Find(key);                                                      \
  if (v == nullptr) {                                                              \
    return NotFound("GGUF " + path_ + ": metadata key '" + std::string(key) + "' not found"); \
  }

namespace {
Status TypeMismatch(const std::string& path, std::string_view key, const Value& v,
                    const char* expected) {
  std::string found = ValueTypeName(v.type);
  if (v.type == ValueType::kArray) {
    found = std::string("array of ") + ValueTypeName(std::get<Array>(v.data).element_type);
  }
  return InvalidArgument("GGUF " + path + ": metadata key '" + std::string(key) + "' is " + found +
                         ", expected " + expected);
}
}  // namespace

Result<std::string> GgufFile::GetString(std::string_view key) const {
  UP_GGUF_LOOKUP(v, key);
  if (v->type != ValueType::kString) return TypeMismatch(path_, key, *v, "string");
  return std::get<std::string>(v->data);
}

Result<uint64_t> GgufFile::GetUInt(std::string_view key) const {
  UP_GGUF_LOOKUP(v, key);
  if (IsUnsigned(v->type)) return std::get<uint64_t>(v->data);
  if (IsSigned(v->type) && std::get<int64_t>(v->data) >= 0) {
    return static_cast<uint64_t>(std::get<int64_t>(v->data));
  }
  return TypeMismatch(path_, key, *v, "a non-negative integer");
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  UP_GGUF_LOOKUP(v, key);
  if (auto x = AsInt(*v)) return *x;
  return TypeMismatch(path_, key, *v, "an integer that fits in i64");
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  UP_GGUF_LOOKUP(v, key);
  if (auto x = AsFloat(*v)) return *x;
  return TypeMismatch(path_, key, *v, "a number");
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  UP_GGUF_LOOKUP(v, key);
  if (v->type != ValueType::kBool) return TypeMismatch(path_, key, *v, "bool");
  return std::get<bool>(v->data);
}

void GgufFile::ReleaseArrays() {
  for (auto& [key, value] : metadata_) {
    if (auto* a = std::get_if<Array>(&value.data)) std::vector<Value>().swap(a->elements);
  }
  arrays_released_ = true;
}

Status GgufFile::CheckArraysKept(std::string_view key) const {
  if (!arrays_released_) return OkStatus();
  return Internal("GGUF " + path_ + ": metadata array '" + std::string(key) +
                  "' was released after the model was loaded; read it before");
}

Result<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  UP_RETURN_IF_ERROR(CheckArraysKept(key));
  UP_GGUF_LOOKUP(v, key);
  if (v->type != ValueType::kArray ||
      std::get<Array>(v->data).element_type != ValueType::kString) {
    return TypeMismatch(path_, key, *v, "array of string");
  }
  std::vector<std::string> out;
  const Array& a = std::get<Array>(v->data);
  out.reserve(a.elements.size());
  for (const Value& e : a.elements) out.push_back(std::get<std::string>(e.data));
  return out;
}

Result<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  UP_RETURN_IF_ERROR(CheckArraysKept(key));
  UP_GGUF_LOOKUP(v, key);
  if (v->type != ValueType::kArray) return TypeMismatch(path_, key, *v, "array of numbers");
  const Array& a = std::get<Array>(v->data);
  std::vector<float> out;
  out.reserve(a.elements.size());
  for (const Value& e : a.elements) {
    auto x = AsFloat(e);
    if (!x) return TypeMismatch(path_, key, *v, "array of numbers");
    out.push_back(static_cast<float>(*x));
  }
  return out;
}

Result<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  UP_RETURN_IF_ERROR(CheckArraysKept(key));
  UP_GGUF_LOOKUP(v, key);
  if (v->type != ValueType::kArray) return TypeMismatch(path_, key, *v, "array of integers");
  const Array& a = std::get<Array>(v->data);
  std::vector<int64_t> out;
  out.reserve(a.elements.size());
  for (size_t i = 0; i < a.elements.size(); ++i) {
    auto x = AsInt(a.elements[i]);
    if (!x) {
      return InvalidArgument("GGUF " + path_ + ": metadata key '" + std::string(key) +
                             "' element " + std::to_string(i) +
                             " is not an integer that fits in i64");
    }
    out.push_back(*x);
  }
  return out;
}

#undef UP_GGUF_LOOKUP

}  // namespace uniprefill::gguf
