// A CUDA-enabled build loads cuBLAS only for a CUDA context (core/cuda/cublas_library.h): linking
// it cost every process ~150 MiB of resident memory. After loading and running a model on the
// CPU, libcublasLt must not be in the process.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/model.h"
#include "testing/required_asset.h"

namespace uniprefill {
namespace {

bool CublasLtLoaded() {
  // RTLD_NOLOAD: a handle only if the library is already in the process.
  void* h = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_NOLOAD);
  if (h != nullptr) dlclose(h);
  return h != nullptr;
}

TEST(CublasNotLoadedTest, ACpuModelLeavesCublasUnloaded) {
  EXPECT_FALSE(CublasLtLoaded()) << "cuBLASLt is in the process before any model";
  const std::string path = std::string(UP_SOURCE_DIR) + "/tests/goldens/hf_tiny/llama";
  UP_REQUIRE_ASSET(path + "/config.json", "the tiny Llama checkpoint");
  auto ctx = DeviceContext::Cpu(1);
  auto model = LoadModel(path, *ctx, LoadOptions{});
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto cache = (*model)->NewCache(16);
  std::vector<int32_t> prompt = {1, 2, 3, 4};
  std::vector<float> logits((*model)->config().vocab_size);
  SequenceStep step{cache.get(), prompt, logits.data(), nullptr};
  ASSERT_TRUE((*model)->ForwardBatch(*ctx, std::span<const SequenceStep>(&step, 1), {}).ok());
  EXPECT_FALSE(CublasLtLoaded()) << "a CPU model loaded cuBLASLt";
}

}  // namespace
}  // namespace uniprefill
