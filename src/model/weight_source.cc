#include "model/weight_source.h"

#include <string>

#include "io/dequant.h"
#include "ops/cpu/cpu_linear_int16_rows.h"
#include "ops/cpu/cpu_ops.h"

namespace uniprefill {

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

class GgufSource final : public WeightSource {
 public:
  explicit GgufSource(const gguf::GgufFile& file) : file_(file) {}
  std::string path() const override { return file_.path(); }
  bool Has(const std::string& name) const override { return file_.FindTensor(name) != nullptr; }
  Result<TensorView> Get(const std::string& name,
                         const std::vector<int64_t>& shape) const override {
    const gguf::TensorInfo* t = file_.FindTensor(name);
    if (!t) {
      return NotFound("model file " + file_.path() + " lacks tensor '" + name + "' (expected " +
                      ShapeToString(shape) + "); is it a complete model of this architecture?");
    }
    std::vector<int64_t> found(t->dims.rbegin(), t->dims.rend());  // GGUF dims: innermost first
    if (found != shape) {
      return InvalidArgument("tensor '" + name + "' has shape " + ShapeToString(found) +
                             ", expected " + ShapeToString(shape) +
                             " from the model's metadata (file " + file_.path() + ")");
    }
    if (!CanDequantize(t->type)) {
      return Unimplemented("tensor '" + name + "' uses quantisation type " + DTypeName(t->type) +
                           ", which this engine does not support yet (supported: F32, F16, BF16, "
                           "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K); re-quantise the "
                           "model, e.g. to Q4_K_M");
    }
    return t->View();
  }

 private:
  const gguf::GgufFile& file_;
};

}  // namespace

std::unique_ptr<WeightSource> GgufWeightSource(const gguf::GgufFile& file) {
  return std::make_unique<GgufSource>(file);
}

Result<ops::LinearWeight> LoadLinear(DeviceContext& ctx, const WeightSource& src,
                                     const std::vector<std::string>& names,
                                     const std::vector<std::vector<int64_t>>& shapes,
                                     bool make_f32_copy, bool unless_int16_gemm) {
  if (std::optional<ops::LinearWeight> described = src.DescribeLinear(names, shapes)) {
    return std::move(*described);
  }
  ops::LinearWeight w;
  for (size_t i = 0; i < names.size(); ++i) {
    UP_ASSIGN_OR_RETURN(TensorView v, src.Get(names[i], shapes[i]));
    if (v.ndim == 1 || v.ndim > 2) {
      return InvalidArgument("tensor '" + names[i] + "' is not a 2-D weight");
    }
    w.in_features = v.dim(1);
    w.out_features += v.dim(0);
    w.parts.push_back(v);
  }
  // A single f32 part already is the GEMM operand's layout: no copy needed.
  const bool already_f32 = w.parts.size() == 1 && w.parts[0].dtype == DType::kF32;
  if (!make_f32_copy || already_f32) return w;
  if (unless_int16_gemm && ops::cpu::CanRunLinearInt16Rows(w, ctx.cpu_isa())) return w;
  // Where the AVX-512 decoders cover it, each GEMM dequantises for itself: the same operand,
  // none of its resident memory (a copy would be ~1.6x the file's weights).
  if (ops::cpu::CanDequantiseForGemm(w, ctx.cpu_isa())) {
    w.f32_on_call = true;
    return w;
  }
  w.f32 = Buffer(sizeof(float) * w.out_features * w.in_features);
  int64_t row0 = 0;
  for (size_t p = 0; p < w.parts.size(); ++p) {
    const TensorView& v = w.parts[p];
    const int64_t rows = v.dim(0), cols = v.dim(1);
    float* dst = w.f32.as<float>() + row0 * cols;
    const int64_t row_bytes = DTypeBytes(v.dtype, cols);
    const auto* bytes = static_cast<const uint8_t*>(v.data);
    std::vector<Status> errors(ctx.threads());
    ctx.pool().ParallelFor(rows, 64, [&](int64_t b, int64_t e, int tid) {
      for (int64_t r = b; r < e && errors[tid].ok(); ++r) {
        errors[tid] = Dequantize(v.dtype, bytes + r * row_bytes, dst + r * cols, cols);
      }
    });
    for (const Status& st : errors) {
      if (!st.ok()) return InvalidArgument("tensor '" + names[p] + "': " + st.message());
    }
    row0 += rows;
  }
  return w;
}

Result<std::vector<float>> LoadVector(const WeightSource& src, const std::string& name, int64_t n,
                                      float offset) {
  UP_ASSIGN_OR_RETURN(TensorView v, src.Get(name, {n}));
  std::vector<float> out(n);
  Status st = Dequantize(v.dtype, v.data, out.data(), n);
  if (!st.ok()) return InvalidArgument("tensor '" + name + "': " + st.message());
  for (float& x : out) x += offset;
  return out;
}

}  // namespace uniprefill
