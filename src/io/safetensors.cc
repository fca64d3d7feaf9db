#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

namespace uniprefill::safetensors {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int kMaxDims = TensorView::kMaxDims;
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr uintmax_t kMaxIndexBytes = 64ull << 20;

// Every dtype of the safetensors format, with its element size in bits; only F32, F16 and BF16 map
// onto an engine DType. Knowing the others lets the error say "unsupported" rather than "unknown".
struct FormatDType {
  const char* name;
  int bits;
  std::optional<DType> engine;
};
constexpr FormatDType kFormatDTypes[] = {
    {"F32", 32, DType::kF32},  {"F16", 16, DType::kF16},  {"BF16", 16, DType::kBF16},
    {"F64", 64, std::nullopt}, {"I64", 64, std::nullopt}, {"U64", 64, std::nullopt},
    {"I32", 32, std::nullopt}, {"U32", 32, std::nullopt}, {"I16", 16, std::nullopt},
    {"U16", 16, std::nullopt}, {"I8", 8, std::nullopt},   {"U8", 8, std::nullopt},
    {"BOOL", 8, std::nullopt}, {"F8_E4M3", 8, std::nullopt}, {"F8_E5M2", 8, std::nullopt},
    {"F8_E8M0", 8, std::nullopt}, {"F6_E2M3", 6, std::nullopt}, {"F6_E3M2", 6, std::nullopt},
    {"F4", 4, std::nullopt},   {"C64", 64, std::nullopt},
};

const FormatDType* FindFormatDType(std::string_view name) {
  for (const FormatDType& d : kFormatDTypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

std::string Quote(std::string_view s) {
  constexpr size_t kMax = 80;
  std::string out = "'";
  out.append(s.substr(0, kMax));
  if (s.size() > kMax) out += "...";
  return out + "'";
}

// A JSON value in an error message, shortened.
std::string Show(const json& j) {
  std::string s = j.dump();
  constexpr size_t kMax = 60;
  return s.size() > kMax ? s.substr(0, kMax) + "..." : s;
}

// A non-negative JSON integer (nlohmann parses those as unsigned).
std::optional<uint64_t> AsU64(const json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0) return static_cast<uint64_t>(j.get<int64_t>());
  return std::nullopt;
}

// Parses a JSON document, reporting parse errors and duplicate keys of the top-level object (which
// nlohmann would otherwise resolve silently to the last one) in `*error`.
std::optional<json> ParseJson(const char* begin, const char* end, std::string* error) {
  std::set<std::string> seen;
  std::string duplicate;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && duplicate.empty() &&
        !seen.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  try {
    json j = json::parse(begin, end, callback);
    if (!duplicate.empty()) {
      *error = "key " + Quote(duplicate) + " appears twice";
      return std::nullopt;
    }
    return j;
  } catch (const json::exception& e) {
    *error = std::string("invalid JSON (") + e.what() + ")";
    return std::nullopt;
  }
}

}  // namespace

// ---- TensorEntry ----------------------------------------------------------------------------

int64_t TensorEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TensorView TensorEntry::View() const {
  TensorView v;
  v.data = const_cast<uint8_t*>(data);
  v.dtype = dtype;
  v.device = Device::kCpu;
  if (shape.empty()) {  // a 0-d scalar
    v.ndim = 1;
    v.shape[0] = 1;
    v.stride[0] = 1;
    return v;
  }
  v.ndim = static_cast<int>(shape.size());
  int64_t st = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = shape[i];
    v.stride[i] = st;
    st *= shape[i];
  }
  return v;
}

// ---- SafetensorsFile ------------------------------------------------------------------------

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return NotFound("safetensors " + path + ": cannot open (" + std::strerror(errno) + ")");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return NotFound("safetensors " + path + ": cannot stat (" + std::strerror(err) + ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return NotFound("safetensors " + path + ": not a regular file");
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return NotFound("safetensors " + path + ": cannot mmap " + std::to_string(f->size_) +
                      " bytes (" + std::strerror(err) + ")");
    }
    f->base_ = static_cast<const uint8_t*>(p);
    f->mapped_ = true;
  }
  ::close(fd);  // the mapping stays valid
  UP_RETURN_IF_ERROR(f->Parse());
  return f;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromMemory(const uint8_t* data,
                                                                     size_t size,
                                                                     const std::string& name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = name;
  f->owned_.assign(data, data + size);
  f->base_ = f->owned_.data();
  f->size_ = size;
  UP_RETURN_IF_ERROR(f->Parse());
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapped_ && base_ != nullptr) ::munmap(const_cast<uint8_t*>(base_), size_);
}

const TensorEntry* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

// Checks one tensor's header entry against the byte buffer of `buffer_size` bytes starting at
// `buffer`, and fills `*t` (all but the name). `err` prefixes errors with the file and tensor.
Status ParseTensorEntry(const json& spec, const uint8_t* buffer, uint64_t buffer_size,
                        const std::string& err, uint64_t* begin_out, TensorEntry* t) {
  if (!spec.is_object()) return DataLoss(err + "is " + Show(spec) + ", expected an object");
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!spec.contains(field)) return DataLoss(err + "has no \"" + field + "\"");
  }
  const json& dt = spec["dtype"];
  if (!dt.is_string()) return DataLoss(err + "has dtype " + Show(dt) + ", expected a string");
  const std::string dtype_name = dt.get<std::string>();
  const FormatDType* fd = FindFormatDType(dtype_name);
  if (fd == nullptr) return DataLoss(err + "has unknown dtype " + Quote(dtype_name));
  if (!fd->engine) {
    return Unimplemented(err + "has dtype " + dtype_name +
                         ", which this engine does not read (supported: F32, F16, BF16)");
  }
  t->dtype = *fd->engine;

  const json& shape = spec["shape"];
  if (!shape.is_array()) return DataLoss(err + "has shape " + Show(shape) + ", expected an array");
  if (shape.size() > static_cast<size_t>(kMaxDims)) {
    return Unimplemented(err + "has " + std::to_string(shape.size()) +
                         " dimensions; this engine reads at most " + std::to_string(kMaxDims));
  }
  int64_t numel = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    const std::optional<uint64_t> dim = AsU64(shape[d]);
    if (!dim || *dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(numel, static_cast<int64_t>(*dim), &numel)) {
      return DataLoss(err + "has invalid dimension " + std::to_string(d) + " = " +
                      Show(shape[d]) + " (must be an integer >= 0 with a total element count < 2^63)");
    }
    t->shape.push_back(static_cast<int64_t>(*dim));
  }
  uint64_t expected_bytes = 0;  // bits are whole bytes for the three supported dtypes
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), static_cast<uint64_t>(fd->bits / 8),
                             &expected_bytes)) {
    return DataLoss(err + "is too large (" + std::to_string(numel) + " elements)");
  }

  const json& off = spec["data_offsets"];
  std::optional<uint64_t> begin, end;
  if (off.is_array() && off.size() == 2) {
    begin = AsU64(off[0]);
    end = AsU64(off[1]);
  }
  if (!begin || !end) {
    return DataLoss(err + "has data_offsets " + Show(off) +
                    ", expected [begin, end] with non-negative integers");
  }
  if (*begin > *end) {
    return DataLoss(err + "has data_offsets [" + std::to_string(*begin) + ", " +
                    std::to_string(*end) + "] with begin > end");
  }
  if (*end > buffer_size) {
    return DataLoss(err + "data [" + std::to_string(*begin) + ", " + std::to_string(*end) +
                    ") runs past the end of the data buffer (" + std::to_string(buffer_size) +
                    " bytes; the file is truncated or the offsets are wrong)");
  }
  if (*end - *begin != expected_bytes) {
    std::string shape_str = "[";
    for (size_t d = 0; d < t->shape.size(); ++d) {
      if (d > 0) shape_str += ", ";
      shape_str += std::to_string(t->shape[d]);
    }
    return DataLoss(err + "has " + std::to_string(*end - *begin) + " data bytes, but dtype " +
                    dtype_name + " and shape " + shape_str + "] need " +
                    std::to_string(expected_bytes));
  }
  t->data = buffer + *begin;
  t->n_bytes = expected_bytes;
  *begin_out = *begin;
  return OkStatus();
}

}  // namespace

Status SafetensorsFile::Parse() {
  const std::string where = "safetensors " + path_ + ": ";
  if (size_ < 8) {
    return DataLoss(where + "file is " + std::to_string(size_) +
                    " bytes, shorter than the 8-byte header length (not a safetensors file?)");
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, base_, 8);  // little-endian, as is every supported host
  if (header_len > kMaxHeaderBytes) {
    return DataLoss(where + "header length " + std::to_string(header_len) + " exceeds the limit of " +
                    std::to_string(kMaxHeaderBytes) + " bytes (not a safetensors file?)");
  }
  if (header_len > size_ - 8) {
    return DataLoss(where + "header of " + std::to_string(header_len) +
                    " bytes runs past the end of the file (" + std::to_string(size_) +
                    " bytes; truncated?)");
  }
  const char* header = reinterpret_cast<const char*>(base_ + 8);
  if (header_len < 2 || header[0] != '{') {
    return DataLoss(where + "header does not start with '{' (not a safetensors file?)");
  }
  std::string json_error;
  std::optional<json> root = ParseJson(header, header + header_len, &json_error);
  if (!root) return DataLoss(where + "header is not a valid JSON object: " + json_error);
  if (!root->is_object()) return DataLoss(where + "header is not a JSON object");

  const uint8_t* buffer = base_ + 8 + header_len;
  const uint64_t buffer_size = size_ - 8 - header_len;
  std::vector<uint64_t> begins;
  for (const auto& [name, spec] : root->items()) {
    if (name == "__metadata__") {
      if (spec.is_null()) continue;
      if (!spec.is_object()) {
        return DataLoss(where + "__metadata__ is " + Show(spec) + ", expected an object");
      }
      for (const auto& [k, v] : spec.items()) {
        if (!v.is_string()) {
          return DataLoss(where + "__metadata__ entry " + Quote(k) + " is " + Show(v) +
                          ", expected a string");
        }
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    TensorEntry t;
    t.name = name;
    uint64_t begin = 0;
    UP_RETURN_IF_ERROR(ParseTensorEntry(spec, buffer, buffer_size,
                                        where + "tensor " + Quote(name) + " ", &begin, &t));
    tensors_.push_back(std::move(t));
    begins.push_back(begin);
  }

  // File order, and no two tensors share bytes.
  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return begins[a] != begins[b] ? begins[a] < begins[b] : tensors_[a].n_bytes < tensors_[b].n_bytes;
  });
  for (size_t k = 1; k < order.size(); ++k) {
    const size_t p = order[k - 1], i = order[k];
    if (begins[i] < begins[p] + tensors_[p].n_bytes) {
      return DataLoss(where + "tensors " + Quote(tensors_[p].name) + " [" +
                      std::to_string(begins[p]) + ", " +
                      std::to_string(begins[p] + tensors_[p].n_bytes) + ") and " +
                      Quote(tensors_[i].name) + " [" + std::to_string(begins[i]) + ", " +
                      std::to_string(begins[i] + tensors_[i].n_bytes) + ") overlap");
    }
  }
  std::vector<TensorEntry> sorted;
  sorted.reserve(tensors_.size());
  for (size_t i : order) sorted.push_back(std::move(tensors_[i]));
  tensors_ = std::move(sorted);
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  return OkStatus();
}

// ---- Checkpoint -----------------------------------------------------------------------------

namespace {

// A shard name from the index must name a file inside the checkpoint directory.
bool IsSafeShardName(const std::string& name) {
  if (name.empty()) return false;
  const fs::path p(name);
  if (p.is_absolute()) return false;
  for (const fs::path& part : p) {
    if (part == "..") return false;
  }
  return true;
}

Result<std::string> ReadSmallFile(const std::string& path, uintmax_t limit) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return NotFound(path + ": cannot read (" + ec.message() + ")");
  if (size > limit) {
    return DataLoss(path + ": is " + std::to_string(size) + " bytes, more than the limit of " +
                    std::to_string(limit));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Result<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& path) {
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  c->path_ = path;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    return NotFound("checkpoint " + path + ": no such file or directory");
  }
  if (fs::is_regular_file(st)) {  // a single .safetensors file
    UP_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
    UP_RETURN_IF_ERROR(c->Add(std::move(file)));
    return c;
  }
  if (!fs::is_directory(st)) {
    return NotFound("checkpoint " + path + ": neither a directory nor a .safetensors file");
  }
  const fs::path dir(path);
  const std::string index_path = (dir / kIndexFile).string();
  const std::string single_path = (dir / kSingleFile).string();
  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(single_path, ec)) {
      return NotFound("checkpoint " + path + ": has neither " + kSingleFile + " nor " + kIndexFile +
                      " (is it a Hugging Face safetensors checkpoint directory?)");
    }
    UP_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single_path));
    UP_RETURN_IF_ERROR(c->Add(std::move(file)));
    return c;
  }

  // Sharded: weight_map names, for every tensor, the shard file holding it.
  UP_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(index_path, kMaxIndexBytes));
  std::string json_error;
  std::optional<json> index = ParseJson(text.data(), text.data() + text.size(), &json_error);
  if (!index) return DataLoss(index_path + ": " + json_error);
  if (!index->is_object() || !index->contains("weight_map") || !(*index)["weight_map"].is_object()) {
    return DataLoss(index_path + ": has no \"weight_map\" object");
  }
  const json& weight_map = (*index)["weight_map"];
  std::map<std::string, size_t> shard_of_file;  // shard name -> position in files_
  for (const auto& [tensor, shard] : weight_map.items()) {
    if (!shard.is_string() || !IsSafeShardName(shard.get<std::string>())) {
      return DataLoss(index_path + ": weight_map entry " + Quote(tensor) + " is " + Show(shard) +
                      ", expected a shard file name inside the checkpoint directory");
    }
    shard_of_file.emplace(shard.get<std::string>(), 0);
  }
  if (shard_of_file.empty()) return DataLoss(index_path + ": weight_map is empty");
  for (auto& [shard, pos] : shard_of_file) {
    const std::string shard_path = (dir / shard).string();
    if (!fs::exists(shard_path, ec)) {
      return NotFound("checkpoint " + path + ": shard " + Quote(shard) + " named in " + kIndexFile +
                      " does not exist");
    }
    UP_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(shard_path));
    pos = c->files_.size();
    UP_RETURN_IF_ERROR(c->Add(std::move(file)));
  }
  for (const auto& [tensor, shard] : weight_map.items()) {
    const SafetensorsFile& file = *c->files_[shard_of_file[shard.get<std::string>()]];
    if (file.Find(tensor) == nullptr) {
      return DataLoss(index_path + ": tensor " + Quote(tensor) + " is mapped to shard " +
                      Quote(shard.get<std::string>()) + ", which does not hold it");
    }
  }
  return c;
}

Status Checkpoint::Add(std::unique_ptr<SafetensorsFile> file) {
  for (const TensorEntry& t : file->tensors()) {
    auto [it, inserted] = index_.emplace(t.name, &t);
    if (!inserted) {
      const std::string other = [&] {
        for (const auto& f : files_) {
          if (f->Find(t.name) == it->second) return f->path();
        }
        return std::string("?");
      }();
      return DataLoss("checkpoint " + path_ + ": tensor " + Quote(t.name) + " is in both " +
                      other + " and " + file->path());
    }
  }
  files_.push_back(std::move(file));
  return OkStatus();
}

const TensorEntry* Checkpoint::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, entry] : index_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace uniprefill::safetensors
