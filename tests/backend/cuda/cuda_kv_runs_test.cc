// CudaKvPool's planes and CudaSequenceCache's runs (backend/cuda/cuda_kv_cache.h, issue 18): told
// its prefill's length, each full-attention layer takes one run of blocks at its first append and
// fills it in order however the layers' chunks interleave; sliding layers, short prefills and an
// untold cache take single blocks; a dropped tail goes back to its run; destroying the cache
// returns every block. And the planes survive the pool's growth: K and V rows written through
// PagedKvAppend read back the same (GatherCacheRows) after the pool doubled under them.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/cuda_glue_kernels.h"
#include "backend/cuda/cuda_kv_cache.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "ops/cuda/cuda_paged_attention.h"
#include "testing/cuda_test_util.h"

namespace uniprefill {
namespace {

constexpr int kBlock = 16, kKvDim = 64;

// Layers: full, sliding (window 32), full, full; one segment.
CacheLayout TestLayout() {
  std::vector<CacheLayerSpec> layers(4);
  for (CacheLayerSpec& l : layers) l.kv_dim = kKvDim;
  layers[1].kind = CacheLayerKind::kSlidingAttention;
  layers[1].window = 32;
  return CacheLayout::WithDropLayers(layers, {});
}

// Appends `rows` entries to every attention layer, chunk by chunk, layers interleaved as the
// model's walk does.
void AppendChunks(CudaSequenceCache& c, int rows, int chunk) {
  std::vector<int32_t> slots;
  for (int at = 0; at < rows; at += chunk) {
    const int n = std::min(chunk, rows - at);
    for (int layer = 0; layer < 4; ++layer) {
      slots.clear();
      ASSERT_TRUE(c.AppendSlots(layer, n, 0, &slots).ok());
    }
  }
}

TEST(CudaKvRunsTest, AToldPrefillLaysEachFullLayerOutInOneRun) {
  UP_CUDA_TEST_CONTEXT(ctx);
  CudaKvPool pool(ctx, TestLayout(), kBlock);
  {
    CudaSequenceCache told(TestLayout(), 2000, &pool);
    told.ExpectPrefill(1000, true);
    AppendChunks(told, 1000, 97);
    const int pages = (1000 + kBlock - 1) / kBlock;
    for (int layer : {0, 2, 3}) {
      EXPECT_EQ(told.contiguous_pages(layer), pages) << "layer " << layer;
      EXPECT_EQ(static_cast<int>(told.blocks(layer).size()), pages);
    }
    // An untold cache beside it: its layers' pages interleave.
    CudaSequenceCache untold(TestLayout(), 2000, &pool);
    AppendChunks(untold, 1000, 97);
    EXPECT_LT(untold.contiguous_pages(0), pages);
    // A short told prefill (fewer pages than a run is worth): single blocks.
    CudaSequenceCache short_one(TestLayout(), 2000, &pool);
    short_one.ExpectPrefill(100, true);
    AppendChunks(short_one, 100, 7);
    EXPECT_LT(short_one.contiguous_pages(0), 7);
  }
  EXPECT_EQ(pool.free_blocks(), pool.num_blocks()) << "every block back in the pool";
}

TEST(CudaKvRunsTest, AChunkSizesItsLayersRunAndADroppedTailGoesBackToIt) {
  UP_CUDA_TEST_CONTEXT(ctx);
  CudaKvPool pool(ctx, TestLayout(), kBlock);
  {
    CudaSequenceCache c(TestLayout(), 4000, &pool);  // not told: the chunk says 900
    std::vector<int32_t> slots;
    ASSERT_TRUE(c.AppendSlots(0, 500, 0, &slots, /*expected=*/900).ok());
    ASSERT_TRUE(c.AppendSlots(2, 10, 0, &slots).ok());  // another layer takes a block meanwhile
    c.DropTail(0, 200);                                 // a bounded segment's padding
    EXPECT_EQ(c.count(0), 300);
    ASSERT_TRUE(c.AppendSlots(0, 600, 0, &slots).ok());  // 900 in all: still one run
    EXPECT_EQ(c.contiguous_pages(0), (900 + kBlock - 1) / kBlock);
  }
  EXPECT_EQ(pool.free_blocks(), pool.num_blocks());
}

// A segment-wise chunk passes the layers outside its segment with 0 rows, step after step: no
// run is taken for them (each step took one again once, and the pool ran out), and a layer
// emptied by DropTail hands its run back before taking another.
TEST(CudaKvRunsTest, EmptyAppendsTakeNoRunAndNothingLeaks) {
  UP_CUDA_TEST_CONTEXT(ctx);
  CudaKvPool pool(ctx, TestLayout(), kBlock);
  ASSERT_TRUE(pool.ReserveFreeBlocks(4096).ok());
  const int free_before = pool.free_blocks();
  {
    CudaSequenceCache c(TestLayout(), 8000, &pool);
    std::vector<int32_t> slots;
    for (int step = 0; step < 20; ++step) {
      ASSERT_TRUE(c.AppendSlots(2, 0, 0, &slots, /*expected=*/3000).ok());
    }
    EXPECT_EQ(pool.free_blocks(), free_before) << "empty appends took blocks";
    ASSERT_TRUE(c.AppendSlots(3, 1000, 0, &slots, /*expected=*/1000).ok());
    c.DropTail(3, 1000);  // emptied: its whole run is unused again
    ASSERT_TRUE(c.AppendSlots(3, 1000, 0, &slots, /*expected=*/1000).ok());
    EXPECT_EQ(c.contiguous_pages(3), (1000 + kBlock - 1) / kBlock);
    EXPECT_EQ(pool.free_blocks(), free_before - (1000 + kBlock - 1) / kBlock);
  }
  EXPECT_EQ(pool.free_blocks(), free_before);
}

TEST(CudaKvRunsTest, PlanesSurviveThePoolGrowing) {
  UP_CUDA_TEST_CONTEXT(ctx);
  CudaKvPool pool(ctx, TestLayout(), kBlock);
  CudaSequenceCache c(TestLayout(), 4000, &pool);
  std::vector<int32_t> slots;
  ASSERT_TRUE(c.AppendSlots(0, 300, 0, &slots).ok());
  const int64_t rows = 300;
  std::mt19937 rng(9);
  std::vector<uint16_t> k(rows * kKvDim), v(rows * kKvDim);
  for (uint16_t& x : k) x = static_cast<uint16_t>(rng());
  for (uint16_t& x : v) x = static_cast<uint16_t>(rng());
  const DeviceBuffer dk = DeviceBuffer::FromHost(k), dv = DeviceBuffer::FromHost(v);
  const DeviceBuffer dslots = DeviceBuffer::FromHost(slots);
  ops::cuda::PagedKvAppend(
      ctx, pool.kv(), pool.coords(true),
      TensorView::Contiguous(const_cast<void*>(dk.data()), DType::kBF16, {rows, kKvDim},
                             Device::kCuda),
      TensorView::Contiguous(const_cast<void*>(dv.data()), DType::kBF16, {rows, kKvDim},
                             Device::kCuda),
      dslots.as<int32_t>(), nullptr);
  const int before = pool.num_blocks();
  const int run = pool.AllocateRun(before + 10);  // longer than the pool: it grows
  ASSERT_GE(run, 0);
  EXPECT_GT(pool.num_blocks(), before);
  std::vector<int32_t> begin = {0, static_cast<int32_t>(rows)};
  const DeviceBuffer table = DeviceBuffer::FromHost(c.blocks(0));
  const DeviceBuffer dbegin = DeviceBuffer::FromHost(begin);
  DeviceBuffer gk(rows * kKvDim * 2), gv(rows * kKvDim * 2);
  cuda_backend::GatherCacheRows(
      ctx, TensorView::Contiguous(gk.data(), DType::kBF16, {rows, kKvDim}, Device::kCuda),
      TensorView::Contiguous(gv.data(), DType::kBF16, {rows, kKvDim}, Device::kCuda), pool.kv(),
      table.as<int32_t>(), static_cast<int>(c.blocks(0).size()), dbegin.as<int32_t>(), 1,
      static_cast<int>(rows));
  ctx.cuda().Synchronize();
  EXPECT_EQ(gk.ToHost<uint16_t>(rows * kKvDim), k);
  EXPECT_EQ(gv.ToHost<uint16_t>(rows * kKvDim), v);
  for (int b = run; b < run + before + 10; ++b) pool.FreeBlock(b);
}

}  // namespace
}  // namespace uniprefill
