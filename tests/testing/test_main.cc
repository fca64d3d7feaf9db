// The test programs' main: GoogleTest's, after the OpenBLAS core repair every uniprefill program
// makes first (core/openblas_core.h), so tests run the GEMM kernels users get.
#include <gtest/gtest.h>

#include "core/openblas_core.h"

int main(int argc, char** argv) {
  uniprefill::RestartIfOpenBlasChoseGenericKernels(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
