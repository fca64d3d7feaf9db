// safetensors reader: maps `.safetensors` files read-only and checks every header field against the
// file before any tensor byte is touched; a Hugging Face checkpoint directory (one file, or shards
// listed in `model.safetensors.index.json`) opens as one name -> tensor table.
//
// Format: u64 little-endian header length N, N bytes of JSON (an object: tensor name ->
// {"dtype", "shape", "data_offsets": [begin, end]} plus an optional "__metadata__" of strings), then
// the byte buffer; offsets are relative to the buffer start (8 + N).
// Goals: a malformed, truncated or hostile file gives a DataLoss Status naming the file, the tensor
// and the offending value (never a crash or an out-of-bounds read); an unsupported dtype gives
// Unimplemented naming the tensor. Tensor data is not copied: TensorEntry::data points into the
// mapping, which lives as long as the SafetensorsFile (or the Checkpoint that owns it).
// Non-goals: writing safetensors; interpreting tensor names (the model loaders do that).
// Invariants: dtype is kF32, kF16 or kBF16; 0 <= shape.size() <= 4; n_bytes = numel * element size;
// [data, data + n_bytes) lies inside the mapping and no two tensors of a file overlap. The data
// pointer is only as aligned as the writer made it (the reference writer aligns the buffer to 8
// bytes but not each tensor), so kernels that need alignment must check or copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace uniprefill::safetensors {

// Largest JSON header accepted (the reference implementation's limit).
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct TensorEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;     // outermost first, as PyTorch stores it: a Linear weight is [out, in]
  const uint8_t* data = nullptr;  // into the mapping
  uint64_t n_bytes = 0;

  int64_t numel() const;
  // A contiguous row-major view with the stored shape (1 to 4 dims; a 0-d scalar becomes [1]).
  TensorView View() const;
};

// One mapped `.safetensors` file.
class SafetensorsFile {
 public:
  // Maps the file read-only. Errors: NotFound (missing/unreadable), DataLoss (malformed/truncated,
  // with the reason), Unimplemented (a dtype other than F32/F16/BF16, or more than 4 dims).
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses a copy of `size` bytes (tests and fuzzing); `name` stands in for the path in errors.
  static Result<std::unique_ptr<SafetensorsFile>> FromMemory(const uint8_t* data, size_t size,
                                                             const std::string& name = "<memory>");
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }
  // Tensors in ascending data-offset order.
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const TensorEntry* Find(std::string_view name) const;
  // The optional "__metadata__" object (string -> string), e.g. {"format": "pt"}.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The whole file as mapped (read-only, file-backed pages); empty when it was read into memory.
  std::span<const uint8_t> mapping() const {
    return mapped_ ? std::span<const uint8_t>(base_, size_) : std::span<const uint8_t>();
  }

 private:
  SafetensorsFile() = default;
  Status Parse();

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;  // base_ from mmap (else from owned_)
  std::vector<uint8_t> owned_;
  std::vector<TensorEntry> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face checkpoint: `model.safetensors`, or the shards named by the `weight_map` of
// `model.safetensors.index.json` (which wins when both exist), seen as one tensor table.
class Checkpoint {
 public:
  // `path` is a checkpoint directory or a single `.safetensors` file. Errors: NotFound (no weights
  // file in the directory, a shard missing), DataLoss (a malformed index or shard, a tensor the index
  // places in a shard that does not hold it, a tensor name found in two shards), and the errors of
  // SafetensorsFile::Open.
  static Result<std::unique_ptr<Checkpoint>> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const TensorEntry* Find(std::string_view name) const;
  // Every tensor name, sorted.
  std::vector<std::string> Names() const;
  size_t size() const { return index_.size(); }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  Checkpoint() = default;
  Status Add(std::unique_ptr<SafetensorsFile> file);

  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, const TensorEntry*> index_;
};

}  // namespace uniprefill::safetensors
