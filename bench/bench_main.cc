// The kernel benchmarks' main: Google Benchmark's, after the OpenBLAS core repair every
// uniprefill program makes first (core/openblas_core.h), so OpenBLAS baselines run the kernels
// users get.
#include <benchmark/benchmark.h>

#include "core/openblas_core.h"

int main(int argc, char** argv) {
  uniprefill::RestartIfOpenBlasChoseGenericKernels(argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
