#include "ops/cpu/cpu_kernel_paths.h"

#include <cstdio>

#include "ops/cpu/cpu_quant_dot.h"
#include "ops/cpu/cpu_quant_dot_i16.h"
#include "ops/cpu/cpu_quant_dot_i8.h"

namespace uniprefill::ops::cpu {
namespace {

// The weight types Linear reads (every dequantisable GGUF type the loaders accept).
constexpr DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                                  DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

std::string Cell(std::string_view level, const char* none) {
  return level.empty() ? none : std::string(level);
}

}  // namespace

std::string DescribeCpuKernelPaths(CpuIsa isa) {
  // Linear's decode matvec per weight type: f32 activations (1..7 rows), int16-quantised
  // activations (1 row), and batched rows (2..64; both int16 unless --f32-decode).
  char line[160];
  std::snprintf(line, sizeof(line), "  %-6s %-22s %-24s %-18s %s\n", "weight",
                "decode f32 activations", "decode int16 activations", "batched int16 rows",
                "batched int8 rows");
  std::string out = line;
  for (DType t : kWeightTypes) {
    const std::string_view i16 = FusedQuantDotI16Level(t, isa);
    const std::string rows = Cell(FusedQuantDotI16RowsLevel(t, isa), "(f32 activations)");
    const std::string rows8 = Cell(FusedQuantDotI8RowsLevel(t, isa), "(as int16 rows)");
    std::snprintf(line, sizeof(line), "  %-6s %-22s %-24s %-18s %s\n", DTypeName(t),
                  Cell(FusedQuantDotLevel(t, isa), "dequantise + f32").c_str(),
                  Cell(i16, "(f32 activations)").c_str(), rows.c_str(), rows8.c_str());
    out += line;
  }
  out += "  2..64 rows (any count without an f32 copy): batched rows where a part has a\n"
         "    multi-row int16 kernel (the others f32 activations), else the paths below\n";
  out += isa >= CpuIsa::kAvx512
             ? "  prefill GEMM (> 64 rows): OpenBLAS sgemm (its own dispatch) on f32 weights\n"
               "    dequantised per call (avx512: Q8_0 Q5_0 Q4_K Q6_K F16 BF16; other types keep\n"
               "    an f32 copy); with --prefill-gemm int16 the batched rows instead; with\n"
             : "  prefill GEMM (> 64 rows): OpenBLAS sgemm on f32 weight copies (its own "
               "dispatch);\n"
               "    with --prefill-gemm int16 no copies, the batched rows instead; with\n";
  out += "    --prefill-gemm int8 the batched int8 rows (every row count >= 2) where a part has\n"
         "    an int8 kernel and the rows are a multiple of 64 long, else the int16 rows\n";
  out += isa >= CpuIsa::kAmxBf16
             ? "    with --prefill-gemm bf16: AMX bf16 tiles (amx-bf16) on 32-column panels\n"
               "    dequantised from the stored weights, no copies; prefill attention on\n"
               "    bf16 tiles too; batched steps of 2..64 rows on AMX as well (a Q8_0\n"
               "    weight's 2..16 rows on int8 tiles read in place, the rest bf16 tiles)\n"
             : "    with --prefill-gemm bf16: the int16 rows (AMX needs the amx-bf16 level)\n";
  out += isa >= CpuIsa::kAvx512 ? "  attention tiles: avx512 (scores of <= 4 rows: avx2)\n"
                                : "  attention tiles: avx2\n";
  out += "  softmax, norms, activations, rope: avx2\n";
  return out;
}

}  // namespace uniprefill::ops::cpu
