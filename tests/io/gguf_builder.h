// GgufBuilder: a small in-memory GGUF writer for tests and fuzz seeds.
//
// It writes exactly what it is told, so tests can build valid files and, just as easily, malformed
// ones (wrong magic or version, huge counts, misaligned offsets, unknown types, data past the end).
// Not a general GGUF writer: no validation, no file output beyond Build()'s bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace uniprefill::gguf::testing {

// Value type ids as written in the file.
enum : uint32_t {
  kTU8 = 0, kTI8 = 1, kTU16 = 2, kTI16 = 3, kTU32 = 4, kTI32 = 5, kTF32 = 6, kTBool = 7,
  kTString = 8, kTArray = 9, kTU64 = 10, kTI64 = 11, kTF64 = 12,
};

// One encoded metadata value: its type id and its bytes (without the type id).
struct Val {
  uint32_t type = kTU8;
  std::vector<uint8_t> bytes;

  template <typename T>
  static Val Scalar(uint32_t type, T x) {
    Val v{type, std::vector<uint8_t>(sizeof(T))};
    std::memcpy(v.bytes.data(), &x, sizeof(T));
    return v;
  }
  static Val U8(uint8_t x) { return Scalar(kTU8, x); }
  static Val I8(int8_t x) { return Scalar(kTI8, x); }
  static Val U16(uint16_t x) { return Scalar(kTU16, x); }
  static Val I16(int16_t x) { return Scalar(kTI16, x); }
  static Val U32(uint32_t x) { return Scalar(kTU32, x); }
  static Val I32(int32_t x) { return Scalar(kTI32, x); }
  static Val F32(float x) { return Scalar(kTF32, x); }
  static Val Bool(bool x) { return Scalar(kTBool, static_cast<uint8_t>(x)); }
  static Val U64(uint64_t x) { return Scalar(kTU64, x); }
  static Val I64(int64_t x) { return Scalar(kTI64, x); }
  static Val F64(double x) { return Scalar(kTF64, x); }
  static Val Str(const std::string& s) { return StrWithLength(s.size(), s); }
  // A string whose length field says `claimed_len` but carries only `s`.
  static Val StrWithLength(uint64_t claimed_len, const std::string& s) {
    Val v{kTString, std::vector<uint8_t>(8 + s.size())};
    std::memcpy(v.bytes.data(), &claimed_len, 8);
    if (!s.empty()) std::memcpy(v.bytes.data() + 8, s.data(), s.size());
    return v;
  }
  // An array of elements that all have type `elem_type` (nest by passing Arr values).
  static Val Arr(uint32_t elem_type, const std::vector<Val>& elems) {
    std::vector<uint8_t> payload;
    for (const Val& e : elems) payload.insert(payload.end(), e.bytes.begin(), e.bytes.end());
    return ArrRaw(elem_type, elems.size(), payload);
  }
  // An array header with any count followed by `payload` as its element bytes.
  static Val ArrRaw(uint32_t elem_type, uint64_t count, const std::vector<uint8_t>& payload) {
    Val v = Scalar(kTArray, elem_type);
    const Val c = Scalar(kTU64, count);
    v.bytes.insert(v.bytes.end(), c.bytes.begin(), c.bytes.end());
    v.bytes.insert(v.bytes.end(), payload.begin(), payload.end());
    return v;
  }
};

class GgufBuilder {
 public:
  GgufBuilder& Magic(uint32_t m) { magic_ = m; return *this; }
  GgufBuilder& Version(uint32_t v) { version_ = v; return *this; }
  // Padding and automatic offsets use this; add the general.alignment key separately (or use
  // Alignment()).
  GgufBuilder& DataAlignment(uint64_t a) { data_alignment_ = a; return *this; }
  GgufBuilder& Alignment(uint32_t a) {
    Kv("general.alignment", Val::U32(a));
    return DataAlignment(a);
  }
  GgufBuilder& Kv(const std::string& key, const Val& v) {
    kvs_.emplace_back(key, v);
    return *this;
  }
  // Overrides the counts written in the header (default: the real counts).
  GgufBuilder& TensorCount(uint64_t n) { tensor_count_ = n; return *this; }
  GgufBuilder& KvCount(uint64_t n) { kv_count_ = n; return *this; }

  // A tensor whose data is `data`, placed at the next aligned offset of the data section.
  GgufBuilder& Tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                      std::vector<uint8_t> data) {
    tensors_.push_back({name, std::move(dims), type, UINT64_MAX, std::move(data)});
    return *this;
  }
  // A tensor info with an explicit offset and no data written for it.
  GgufBuilder& TensorInfoOnly(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                              uint64_t offset) {
    tensors_.push_back({name, std::move(dims), type, offset, {}});
    return *this;
  }

  std::vector<uint8_t> Build() const {
    std::vector<uint8_t> out;
    Put(out, magic_);
    Put(out, version_);
    Put<uint64_t>(out, tensor_count_.value_or(tensors_.size()));
    Put<uint64_t>(out, kv_count_.value_or(kvs_.size()));
    for (const auto& [key, v] : kvs_) {
      PutString(out, key);
      Put(out, v.type);
      out.insert(out.end(), v.bytes.begin(), v.bytes.end());
    }
    // Assign offsets first: automatic ones follow the previous tensor, aligned.
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const TensorEntry& t : tensors_) {
      const uint64_t off = t.offset != UINT64_MAX ? t.offset : AlignUp(next);
      offsets.push_back(off);
      if (t.offset == UINT64_MAX) next = off + t.data.size();
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const TensorEntry& t = tensors_[i];
      PutString(out, t.name);
      Put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) Put(out, d);
      Put(out, t.type);
      Put(out, offsets[i]);
    }
    if (tensors_.empty()) return out;
    const size_t data_start = AlignUp(out.size());
    out.resize(data_start, 0);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const TensorEntry& t = tensors_[i];
      if (t.data.empty()) continue;
      const size_t at = data_start + offsets[i];
      if (out.size() < at + t.data.size()) out.resize(at + t.data.size(), 0);
      std::memcpy(out.data() + at, t.data.data(), t.data.size());
    }
    return out;
  }

 private:
  struct TensorEntry {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    uint64_t offset;  // UINT64_MAX: automatic
    std::vector<uint8_t> data;
  };

  template <typename T>
  static void Put(std::vector<uint8_t>& out, T x) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &x, sizeof(T));
  }
  static void PutString(std::vector<uint8_t>& out, const std::string& s) {
    Put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  uint64_t AlignUp(uint64_t x) const {
    return (x + data_alignment_ - 1) / data_alignment_ * data_alignment_;
  }

  uint32_t magic_ = 0x46554747;  // "GGUF"
  uint32_t version_ = 3;
  uint64_t data_alignment_ = 32;
  std::optional<uint64_t> tensor_count_;
  std::optional<uint64_t> kv_count_;
  std::vector<std::pair<std::string, Val>> kvs_;
  std::vector<TensorEntry> tensors_;
};

}  // namespace uniprefill::gguf::testing
