#include "model/linear_loader.h"

#include <string>

#include "io/dequant.h"

namespace uniprefill {

Result<ops::LinearWeight> LoadLinear(DeviceContext& ctx,
                                     const std::vector<const gguf::TensorInfo*>& parts,
                                     bool make_f32_copy) {
  ops::LinearWeight w;
  for (const gguf::TensorInfo* t : parts) {
    TensorView v = t->View();
    if (w.in_features && v.dim(1) != w.in_features) {
      return InvalidArgument("tensor '" + t->name + "' has " + std::to_string(v.dim(1)) +
                             " inputs, but the layer's other parts have " +
                             std::to_string(w.in_features));
    }
    w.in_features = v.dim(1);
    w.out_features += v.dim(0);
    w.parts.push_back(v);
  }
  if (!make_f32_copy) return w;
  w.f32 = Buffer(sizeof(float) * w.out_features * w.in_features);
  int64_t row0 = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    const TensorView& v = w.parts[p];
    const int64_t rows = v.dim(0), cols = v.dim(1);
    float* dst = w.f32.as<float>() + row0 * cols;
    const int64_t row_bytes = DTypeBytes(v.dtype, cols);
    const auto* src = static_cast<const uint8_t*>(v.data);
    Status first_error;
    ctx.pool().ParallelFor(rows, 64, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) {
        Status st = Dequantize(v.dtype, src + r * row_bytes, dst + r * cols, cols);
        if (!st.ok() && r == b && b == 0) first_error = st;
      }
    });
    UP_RETURN_IF_ERROR(first_error);
    row0 += rows;
  }
  return w;
}

Status LoadVector(const gguf::TensorInfo& t, std::vector<float>* out) {
  out->resize(t.numel());
  Status st = Dequantize(t.type, t.data, out->data(), t.numel());
  if (!st.ok()) return InvalidArgument("tensor '" + t.name + "': " + st.message());
  return OkStatus();
}

}  // namespace uniprefill
