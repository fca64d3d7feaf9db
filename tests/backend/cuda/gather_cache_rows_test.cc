// GatherCacheRows (backend/cuda/cuda_glue_kernels.h): sequences' cache entries copied out of a
// KV pool into contiguous K and V rows, checked bit for bit against the same copy on the host,
// with blocks handed out in shuffled order, lengths of 1, inside a block, on a block edge and
// long, and an empty sequence; pools laid out like CudaKvPool::kv() (a K plane, then a V plane)
// and with K | V interleaved per block (strides are the kernel's only knowledge of the layout).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/cuda_glue_kernels.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "testing/cuda_test_util.h"

namespace uniprefill::cuda_backend {
namespace {

void CheckGather(DeviceContext& ctx, bool planar) {
  constexpr int kBlock = 16, kPoolBlocks = 64, kMaxBlocks = 24;
  constexpr int64_t kKvDim = 136;  // 17 x 8 elements: not a multiple of the 128 threads
  // Elements from one block's K rows to the next block's, and from K rows to V rows.
  const int64_t blk_stride = (planar ? 1 : 2) * kBlock * kKvDim;
  const int64_t v_off = planar ? int64_t{kPoolBlocks} * kBlock * kKvDim : kBlock * kKvDim;
  const std::vector<int32_t> lengths = {1, 37, 0, 48, 300};
  const int n = static_cast<int>(lengths.size());
  std::mt19937 rng(7);
  std::vector<uint16_t> pool(int64_t{kPoolBlocks} * 2 * kBlock * kKvDim);
  for (uint16_t& x : pool) x = static_cast<uint16_t>(rng());
  std::vector<int32_t> blocks(kPoolBlocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<int32_t> table(int64_t{n} * kMaxBlocks, -1), begin{0};
  int next = 0;
  for (int b = 0; b < n; ++b) {
    for (int a = 0; a < lengths[b]; a += kBlock)
      table[b * kMaxBlocks + a / kBlock] = blocks[next++];
    begin.push_back(begin.back() + lengths[b]);
  }
  const int64_t rows = begin.back();
  std::vector<uint16_t> want_k(rows * kKvDim), want_v(rows * kKvDim);
  for (int b = 0; b < n; ++b) {
    for (int a = 0; a < lengths[b]; ++a) {
      const int64_t block = table[b * kMaxBlocks + a / kBlock];
      const int64_t src = (block * blk_stride) + (a % kBlock) * kKvDim;
      std::copy_n(pool.begin() + src, kKvDim, want_k.begin() + (begin[b] + a) * kKvDim);
      std::copy_n(pool.begin() + src + v_off, kKvDim, want_v.begin() + (begin[b] + a) * kKvDim);
    }
  }
  const DeviceBuffer pool_dev = DeviceBuffer::FromHost(pool);
  const DeviceBuffer table_dev = DeviceBuffer::FromHost(table);
  const DeviceBuffer begin_dev = DeviceBuffer::FromHost(begin);
  DeviceBuffer k(rows * kKvDim * 2), v(rows * kKvDim * 2);
  k.Fill(0xFF);
  v.Fill(0xFF);
  UP_CUDA_CHECK(cudaDeviceSynchronize());  // the copies ran on the legacy stream
  TensorView kv = TensorView::Contiguous(pool_dev.data(), DType::kBF16,
                                         {kPoolBlocks, 2, kBlock, kKvDim}, Device::kCuda);
  kv.stride[0] = blk_stride;
  kv.stride[1] = v_off;
  GatherCacheRows(ctx,
                  TensorView::Contiguous(k.data(), DType::kBF16, {rows, kKvDim}, Device::kCuda),
                  TensorView::Contiguous(v.data(), DType::kBF16, {rows, kKvDim}, Device::kCuda), kv,
                  table_dev.as<int32_t>(), kMaxBlocks, begin_dev.as<int32_t>(), n,
                  *std::max_element(lengths.begin(), lengths.end()));
  UP_CUDA_CHECK(cudaStreamSynchronize(ctx.cuda().stream()));
  EXPECT_EQ(k.ToHost<uint16_t>(rows * kKvDim), want_k) << (planar ? "planar" : "interleaved");
  EXPECT_EQ(v.ToHost<uint16_t>(rows * kKvDim), want_v) << (planar ? "planar" : "interleaved");
}

TEST(GatherCacheRowsTest, CopiesEveryEntryOfEverySequence) {
  UP_CUDA_TEST_CONTEXT(ctx);
  CheckGather(ctx, /*planar=*/true);
  CheckGather(ctx, /*planar=*/false);
}

}  // namespace
}  // namespace uniprefill::cuda_backend
