// GGUF reader: parses a GGUF v2/v3 file (metadata of every type, nested arrays, tensor infos,
// alignment) from an mmap'd file or a memory buffer.
//
// Goals: every count, length, offset and size is checked against the file before it is used, so a
// malformed or truncated file yields a DataLoss Status naming what is wrong (key or tensor name,
// the value found and the limit), never a crash or an out-of-bounds read. Tensor data is not copied:
// TensorInfo::data points into the mapping, which lives as long as the GgufFile.
// Non-goals: writing GGUF; interpreting metadata (models and tokenizers do that).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace uniprefill::gguf {

enum class ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* ValueTypeName(ValueType t);

struct Value;
struct Array {
  ValueType element_type = ValueType::kU8;
  std::vector<Value> elements;
};

// One metadata value. Integers are widened (unsigned into uint64_t, signed into int64_t), floats
// into double; `type` keeps the type written in the file.
struct Value {
  ValueType type = ValueType::kU8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> data;
};

struct TensorInfo {
  std::string name;
  DType type = DType::kF32;
  std::vector<int64_t> dims;   // GGUF order: dims[0] is the contiguous dimension
  uint64_t offset = 0;         // relative to the data section
  uint64_t n_bytes = 0;        // validated to lie inside the file
  const uint8_t* data = nullptr;  // into the mapping

  int64_t numel() const;
  // A 2-D (or 1-D) row-major view in engine order: GGUF dims [in, out] -> shape [out, in].
  TensorView View() const;
};

class GgufFile {
 public:
  // Maps the file read-only. Errors: NotFound (missing/unreadable), DataLoss (malformed/truncated,
  // with the reason), Unimplemented (unknown GGUF version).
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses a copy of `size` bytes (tests and the fuzzer).
  static Result<std::unique_ptr<GgufFile>> FromMemory(const uint8_t* data, size_t size);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* Find(std::string_view key) const;

  // Typed getters: NotFound if absent, InvalidArgument if the stored type does not convert
  // (any integer type converts to any integer result when the value fits; f32/f64 to float).
  Result<std::string> GetString(std::string_view key) const;
  Result<uint64_t> GetUInt(std::string_view key) const;
  Result<int64_t> GetInt(std::string_view key) const;
  Result<double> GetFloat(std::string_view key) const;
  Result<bool> GetBool(std::string_view key) const;
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;
  Result<std::vector<float>> GetFloatArray(std::string_view key) const;
  Result<std::vector<int64_t>> GetIntArray(std::string_view key) const;

  // Frees every metadata array's elements (vocabularies: a 262K-token one holds ~38 MiB as
  // Values) once what reads them (tokenizer, model config) has: a model keeps its file for the
  // weights' mapping until exit. Afterwards the array getters fail (Internal: a reader came too
  // late) and an array Value holds no elements.
  void ReleaseArrays();

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* FindTensor(std::string_view name) const;
  // The whole file as mapped (read-only, file-backed pages); empty when it was read into memory.
  std::span<const uint8_t> mapping() const {
    return mapped_ ? std::span<const uint8_t>(base_, size_) : std::span<const uint8_t>();
  }

 private:
  GgufFile() = default;
  Status Parse();
  Status CheckArraysKept(std::string_view key) const;

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;            // base_ from mmap (else from owned_)
  std::vector<uint8_t> owned_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  std::vector<std::pair<std::string, Value>> metadata_;
  bool arrays_released_ = false;
  std::unordered_map<std::string, size_t> metadata_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace uniprefill::gguf
