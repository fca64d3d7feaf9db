// libFuzzer target for the GGUF reader: parse arbitrary bytes, then touch everything the parser
// hands out (every metadata value, every typed getter, every tensor view) and dequantize the first
// block of every tensor, so an unchecked count, offset or size shows up under ASan/UBSan.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "io/dequant.h"
#include "io/gguf.h"

namespace {

using uniprefill::gguf::Array;
using uniprefill::gguf::Value;

// Reads every leaf of a value; returns a checksum so nothing is optimised away.
uint64_t Touch(const Value& v) {
  uint64_t sum = static_cast<uint64_t>(v.type);
  if (const auto* a = std::get_if<Array>(&v.data)) {
    for (const Value& e : a->elements) sum += Touch(e);
  } else if (const auto* s = std::get_if<std::string>(&v.data)) {
    for (char c : *s) sum += static_cast<uint8_t>(c);
  } else if (const auto* u = std::get_if<uint64_t>(&v.data)) {
    sum += *u;
  } else if (const auto* i = std::get_if<int64_t>(&v.data)) {
    sum += static_cast<uint64_t>(*i);
  } else if (const auto* b = std::get_if<bool>(&v.data)) {
    sum += *b;
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = uniprefill::gguf::GgufFile::FromMemory(data, size);
  if (!file.ok()) return 0;
  const auto& f = *file.value();
  volatile uint64_t sink = 0;
  for (const auto& [key, value] : f.metadata()) {
    sink = sink + Touch(value);
    // The getters must fail cleanly on any type.
    (void)f.GetString(key).ok();
    (void)f.GetUInt(key).ok();
    (void)f.GetInt(key).ok();
    (void)f.GetFloat(key).ok();
    (void)f.GetBool(key).ok();
    (void)f.GetStringArray(key).ok();
    (void)f.GetFloatArray(key).ok();
    (void)f.GetIntArray(key).ok();
  }
  std::vector<float> out;
  for (const auto& t : f.tensors()) {
    const uniprefill::TensorView v = t.View();
    sink = sink + static_cast<uint64_t>(v.numel()) + t.n_bytes;
    if (f.FindTensor(t.name) != &t) __builtin_trap();
    const auto info = uniprefill::GetDTypeInfo(static_cast<uint32_t>(t.type));
    if (!info || !uniprefill::CanDequantize(t.type)) continue;
    // The first block (every tensor holds at least one: dims > 0, dims[0] % block == 0).
    if (t.n_bytes < static_cast<uint64_t>(info->block_bytes)) __builtin_trap();
    out.resize(static_cast<size_t>(info->block_elems));
    if (!uniprefill::Dequantize(t.type, t.data, out.data(), info->block_elems).ok()) {
      __builtin_trap();
    }
    for (float x : out) sink = sink + static_cast<uint64_t>(x == x);
  }
  return 0;
}
