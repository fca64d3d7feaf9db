// The CUDA paged KV ops (ops/cuda/cuda_paged_attention.h): PagedDecodeAttention (both kernels,
// tensor cores and CUDA cores, on every case) vs the CPU
// ops::Attention (f32, on the same bf16-rounded inputs, keys gathered from the blocks in table
// order on the host) over shuffled non-contiguous block ids, sequence lengths 0..5000 (and 32K,
// where the keys are split over hundreds of CTAs), GQA 1/4/8 (and 3, 16), head dims 64/128/256,
// block sizes 16/32/64, sliding windows with released (kNoBlock) pages, gapped positions, queries
// that see only part of their keys or none, strided pool / q / out layouts. Unread memory is
// poisoned: every pool slot that holds no key, the spare table entries' block and the pool padding
// hold bf16 NaN, and outputs and scratch start as 0xFF bytes (NaN), so a kernel that reads past a
// request's keys or forgets an output fails RelativeL2Error. Bound: normalised error < 1e-2 (the
// bf16 output alone rounds by ~3e-3 relative). PagedKvAppend is checked bit for bit over the whole
// pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/cuda_paged_attention.h"
#include "ops/ops.h"
#include "testing/cuda_test_util.h"

namespace uniprefill::ops {
namespace {

namespace ut = ::uniprefill::testing;

constexpr double kBound = 1e-2;
constexpr uint16_t kNanBits = 0x7FC0;

DeviceContext& Cpu() {
  static std::unique_ptr<DeviceContext> ctx = DeviceContext::Cpu(2);
  return *ctx;
}

enum class QueryPos {
  kLast,       // q_pos = the last key's position (the token just appended)
  kAfterLast,  // q_pos = last + 3
  kMiddle,     // q_pos = the position of key L / 2: the later keys are invisible
  kBeforeAll,  // q_pos below every key: nothing visible, zeros out
};

const char* KernelName(cuda::DecodeAttentionKernel k) {
  switch (k) {
    case cuda::DecodeAttentionKernel::kTensorCores:
      return "tensor-cores";
    case cuda::DecodeAttentionKernel::kCudaCores:
      return "cuda-cores";
    default:
      return "auto";
  }
}

constexpr cuda::DecodeAttentionKernel kBothKernels[] = {cuda::DecodeAttentionKernel::kTensorCores,
                                                        cuda::DecodeAttentionKernel::kCudaCores};

struct PagedCase {
  int hq = 8, hkv = 2, d = 128, block_tokens = 16, window = 0;
  std::vector<int> seq_lens;
  QueryPos query = QueryPos::kLast;
  bool gaps = true;            // positions jump by 1..5 at random (UniPrefill drops)
  bool release_pages = false;  // pages wholly behind the window become kNoBlock (-1)
  bool strided = false;        // padded pool rows / V offset / block stride, strided q and out
  int extra_max_seq_len = 0;   // max_seq_len = longest + this (a loose host bound)
  uint32_t seed = 1;
  cuda::DecodeAttentionKernel kernel = cuda::DecodeAttentionKernel::kAuto;

  std::string Describe() const {
    std::ostringstream s;
    s << "kernel " << KernelName(kernel) << " hq " << hq << " hkv " << hkv << " d " << d << " bt " << block_tokens << " window "
      << window << " query " << static_cast<int>(query) << " release " << release_pages
      << " strided " << strided << " seq_lens";
    for (int l : seq_lens) s << " " << l;
    return s.str();
  }
};

struct PagedResult {
  std::vector<float> out;  // f32 [B, Hq, D] from the GPU (bf16 values)
  std::vector<float> ref;  // f32 [B, Hq, D] from ops::Attention
  size_t scratch_bytes = 0;
};

PagedResult RunPaged(DeviceContext& ctx, const PagedCase& c) {
  std::mt19937 rng(c.seed);
  const int B = static_cast<int>(c.seq_lens.size());
  const int D = c.d, bt = c.block_tokens, kv_dim = c.hkv * c.d;
  const int64_t row_stride = c.strided ? kv_dim + 8 : kv_dim;
  const int64_t v_off = c.strided ? bt * row_stride + 16 : bt * row_stride;
  const int64_t blk_stride = c.strided ? 2 * v_off + 24 : 2 * v_off;
  const int64_t pos_stride = c.strided ? bt + 5 : bt;

  // Positions and query positions.
  std::vector<std::vector<int32_t>> pos(B);
  std::vector<int32_t> q_pos(B);
  for (int b = 0; b < B; ++b) {
    const int L = c.seq_lens[b];
    std::uniform_int_distribution<int> gap(1, 5), coin(0, 3);
    int32_t p = coin(rng);
    for (int j = 0; j < L; ++j) {
      pos[b].push_back(p);
      p += (c.gaps && coin(rng) == 0) ? gap(rng) : 1;
    }
    const int32_t last = L > 0 ? pos[b].back() : 0;
    switch (c.query) {
      case QueryPos::kLast:
        q_pos[b] = last;
        break;
      case QueryPos::kAfterLast:
        q_pos[b] = last + 3;
        break;
      case QueryPos::kMiddle:
        q_pos[b] = L > 0 ? pos[b][L / 2] : 0;
        break;
      case QueryPos::kBeforeAll:
        q_pos[b] = L > 0 ? pos[b][0] - 1 : -1;
        break;
    }
  }

  // Pages: shuffled block ids; one extra NaN block fills the spare table entries.
  std::vector<int> pages(B);
  int total_pages = 0, max_pages = 0;
  for (int b = 0; b < B; ++b) {
    pages[b] = (c.seq_lens[b] + bt - 1) / bt;
    total_pages += pages[b];
    max_pages = std::max(max_pages, pages[b]);
  }
  const int num_blocks = total_pages + 3;
  std::vector<int> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int poison_block = ids[total_pages];
  const int max_blocks = max_pages + 2;
  std::vector<int32_t> table(static_cast<size_t>(B) * max_blocks, poison_block);

  std::vector<uint16_t> pool(num_blocks * blk_stride, kNanBits);
  std::vector<int32_t> pos_pool(num_blocks * pos_stride, 0);
  // Host copies of each request's keys / values in table order, f32 [L, Hkv, D].
  std::vector<std::vector<float>> keys(B), values(B);
  std::vector<std::vector<int32_t>> key_pos(B);
  int next = 0;
  for (int b = 0; b < B; ++b) {
    const int L = c.seq_lens[b];
    for (int pg = 0; pg < pages[b]; ++pg) {
      const int blk = ids[next++];
      const int first = pg * bt, count = std::min(bt, L - first);
      const bool released =
          c.release_pages && c.window > 0 && pos[b][first + count - 1] <= q_pos[b] - c.window;
      table[static_cast<size_t>(b) * max_blocks + pg] = released ? -1 : blk;
      for (int o = 0; o < count; ++o) {
        const std::vector<float> k = ut::RandomBf16Values(rng, kv_dim, -2.0f, 2.0f);
        const std::vector<float> v = ut::RandomBf16Values(rng, kv_dim, -2.0f, 2.0f);
        for (int e = 0; e < kv_dim; ++e) {
          pool[blk * blk_stride + o * row_stride + e] = ut::F32ToBf16Bits(k[e]);
          pool[blk * blk_stride + v_off + o * row_stride + e] = ut::F32ToBf16Bits(v[e]);
        }
        pos_pool[blk * pos_stride + o] = pos[b][first + o];
        if (released) continue;  // invisible anyway; the kernel must not read the block
        keys[b].insert(keys[b].end(), k.begin(), k.end());
        values[b].insert(values[b].end(), v.begin(), v.end());
        key_pos[b].push_back(pos[b][first + o]);
      }
    }
  }

  // q (strided: a column slice of a fused [B, (Hq + 2 Hkv) * D] QKV row) and out.
  const int64_t q_row = c.strided ? (c.hq + 2 * c.hkv) * D : c.hq * D;
  const int64_t o_row = c.strided ? c.hq * D + 8 : c.hq * D;
  std::vector<float> q_host = ut::RandomBf16Values(rng, static_cast<size_t>(B) * q_row, -2, 2);

  DeviceBuffer d_pool = DeviceBuffer::FromHost(pool);
  DeviceBuffer d_pos = DeviceBuffer::FromHost(pos_pool);
  DeviceBuffer d_table = DeviceBuffer::FromHost(table);
  DeviceBuffer d_seq = DeviceBuffer::FromHost(c.seq_lens);
  DeviceBuffer d_qpos = DeviceBuffer::FromHost(q_pos);
  DeviceBuffer d_q = DeviceBuffer::FromHost(ut::ToBf16(q_host));
  DeviceBuffer d_out(std::max<size_t>(2, static_cast<size_t>(B) * o_row * 2));
  d_out.Fill(0xFF);

  TensorView kv_view = TensorView::Contiguous(d_pool.data(), DType::kBF16,
                                              {num_blocks, 2, bt, kv_dim}, Device::kCuda);
  kv_view.stride = {blk_stride, v_off, row_stride, 1};
  TensorView pos_view =
      TensorView::Contiguous(d_pos.data(), DType::kI32, {num_blocks, bt}, Device::kCuda);
  pos_view.stride[0] = pos_stride;
  TensorView q_view = TensorView::Contiguous(d_q.data(), DType::kBF16, {B, c.hq, D}, Device::kCuda);
  q_view.stride[0] = q_row;
  TensorView out_view =
      TensorView::Contiguous(d_out.data(), DType::kBF16, {B, c.hq, D}, Device::kCuda);
  out_view.stride[0] = o_row;

  cuda::PagedDecodeBatch batch;
  batch.block_tables = d_table.as<int32_t>();
  batch.max_blocks_per_seq = max_blocks;
  batch.seq_lens = d_seq.as<int32_t>();
  batch.q_pos = d_qpos.as<int32_t>();
  batch.max_seq_len = *std::max_element(c.seq_lens.begin(), c.seq_lens.end()) +
                      std::min(c.extra_max_seq_len, bt);  // stays within max_blocks pages
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(D));
  params.window = c.window;

  PagedResult r;
  r.scratch_bytes = cuda::PagedDecodeAttentionScratchBytes(ctx, B, c.hq, c.hkv, D,
                                                            batch.max_seq_len, c.kernel);
  DeviceBuffer scratch(std::max<size_t>(1, r.scratch_bytes));
  scratch.Fill(0xFF);
  cuda::PagedDecodeAttention(ctx, out_view, q_view, kv_view, pos_view, batch, params,
                             r.scratch_bytes ? scratch.data() : nullptr, r.scratch_bytes,
                             c.kernel);
  ctx.cuda().Synchronize();
  const std::vector<uint16_t> out_bits = d_out.ToHost<uint16_t>(static_cast<size_t>(B) * o_row);

  // Reference: ops::Attention per request over its gathered keys.
  r.ref.assign(static_cast<size_t>(B) * c.hq * D, 0.0f);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < c.hq; ++h) {
      for (int e = 0; e < D; ++e) {
        r.out.push_back(ut::Bf16BitsToF32(out_bits[b * o_row + h * D + e]));
      }
    }
    const int64_t L = static_cast<int64_t>(key_pos[b].size());
    if (L == 0) continue;  // no key at all: zeros
    std::vector<float> qb(q_host.begin() + b * q_row, q_host.begin() + b * q_row + c.hq * D);
    TensorView qv = TensorView::Contiguous(qb.data(), DType::kF32, {1, c.hq, D});
    TensorView kv = TensorView::Contiguous(keys[b].data(), DType::kF32, {L, c.hkv, D});
    TensorView vv = TensorView::Contiguous(values[b].data(), DType::kF32, {L, c.hkv, D});
    TensorView ov = TensorView::Contiguous(r.ref.data() + static_cast<size_t>(b) * c.hq * D,
                                           DType::kF32, {1, c.hq, D});
    Attention(Cpu(), ov, qv, kv, vv, &q_pos[b], key_pos[b].data(), params);
  }
  return r;
}

// Both kernels on the same inputs (same seed), each against the CPU reference.
void ExpectMatches(DeviceContext& ctx, PagedCase c) {
  for (cuda::DecodeAttentionKernel k : kBothKernels) {
    c.kernel = k;
    const PagedResult r = RunPaged(ctx, c);
    EXPECT_LT(ut::RelativeL2Error(r.out, r.ref), kBound) << c.Describe();
  }
}

TEST(CudaPagedAttentionTest, MatchesCpuOverHeadDimsGroupsAndBlockSizes) {
  UP_CUDA_TEST_CONTEXT(ctx);
  uint32_t seed = 1;
  const int dims[3] = {64, 128, 256}, groups[3] = {1, 4, 8}, block_sizes[3] = {16, 32, 64};
  for (int di = 0; di < 3; ++di) {
    for (int gi = 0; gi < 3; ++gi) {
      const int d = dims[di], group = groups[gi];
      PagedCase c;
      c.hkv = 2;
      c.hq = 2 * group;
      c.d = d;
      // A Latin square: every (D, block size) and every (group, block size) pair appears.
      c.block_tokens = block_sizes[(di + gi) % 3];
      // Short sequences (one split per request) and long ones (split-K), in separate launches.
      c.seq_lens = {1, 15, 16, 17, 100};
      c.seed = seed++;
      ExpectMatches(ctx, c);
      c.seq_lens = {1000, 5000, 17, 0};
      c.seed = seed++;
      ExpectMatches(ctx, c);
    }
  }
}

TEST(CudaPagedAttentionTest, BlockSizes16And32And64WithGqa4) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (int bt : {16, 32, 64}) {
    PagedCase c;
    c.hq = 16;
    c.hkv = 4;
    c.d = 128;
    c.block_tokens = bt;
    c.seq_lens = {1, 15, 16, 17, 100, 1000, 5000};
    c.seed = 100 + bt;
    ExpectMatches(ctx, c);
  }
}

TEST(CudaPagedAttentionTest, SlidingWindowWithGapsAndReleasedPages) {
  UP_CUDA_TEST_CONTEXT(ctx);
  uint32_t seed = 200;
  for (int d : {64, 128, 256}) {
    for (bool release : {false, true}) {
      PagedCase c;
      c.hq = 8;
      c.hkv = 1;
      c.d = d;
      c.block_tokens = 16;
      c.window = 64;
      c.release_pages = release;
      c.seq_lens = {1, 15, 16, 17, 100, 1000, 5000};
      c.seed = seed++;
      ExpectMatches(ctx, c);
    }
  }
}

TEST(CudaPagedAttentionTest, WindowLargerThanContextAndQueryAfterLastKey) {
  UP_CUDA_TEST_CONTEXT(ctx);
  PagedCase c;
  c.hq = 4;
  c.hkv = 4;
  c.d = 64;
  c.block_tokens = 32;
  c.window = 4096;
  c.query = QueryPos::kAfterLast;
  c.seq_lens = {3, 100, 1000, 5000};
  c.seed = 300;
  ExpectMatches(ctx, c);
}

TEST(CudaPagedAttentionTest, QueryInTheMiddleSeesOnlyEarlierKeys) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (int window : {0, 64}) {
    PagedCase c;
    c.hq = 8;
    c.hkv = 2;
    c.d = 128;
    c.block_tokens = 16;
    c.window = window;
    c.query = QueryPos::kMiddle;
    c.seq_lens = {1, 15, 16, 17, 100, 1000, 5000};
    c.seed = 400 + window;
    ExpectMatches(ctx, c);
  }
}

TEST(CudaPagedAttentionTest, NoVisibleKeyGivesZeros) {
  UP_CUDA_TEST_CONTEXT(ctx);
  PagedCase c;
  c.hq = 8;
  c.hkv = 2;
  c.d = 128;
  c.query = QueryPos::kBeforeAll;
  c.seq_lens = {1, 17, 1000, 0};
  c.seed = 500;
  for (cuda::DecodeAttentionKernel k : kBothKernels) {
    c.kernel = k;
    const PagedResult r = RunPaged(ctx, c);
    for (size_t i = 0; i < r.out.size(); ++i) {
      ASSERT_EQ(r.out[i], 0.0f) << "element " << i << " " << c.Describe();
    }
  }
}

TEST(CudaPagedAttentionTest, StridedPoolQueryAndOutputLayouts) {
  UP_CUDA_TEST_CONTEXT(ctx);
  uint32_t seed = 600;
  for (int d : {64, 128, 256}) {
    PagedCase c;
    c.hq = 12;  // group 3: a 4-head CTA with one idle head
    c.hkv = 4;
    c.d = d;
    c.block_tokens = 32;
    c.strided = true;
    c.extra_max_seq_len = 7;
    c.seq_lens = {1, 15, 16, 17, 100, 1000, 5000};
    c.seed = seed++;
    ExpectMatches(ctx, c);
  }
}

TEST(CudaPagedAttentionTest, GroupsOfSixteenTakeTwoHeadChunks) {
  UP_CUDA_TEST_CONTEXT(ctx);
  PagedCase c;
  c.hq = 32;
  c.hkv = 2;
  c.d = 128;
  c.block_tokens = 16;
  c.seq_lens = {1, 100, 1000, 5000};
  c.seed = 700;
  ExpectMatches(ctx, c);
  c.hq = 48;  // group 24: two tensor-core chunks (16 + 8 heads), three CUDA-core ones
  c.seed = 701;
  ExpectMatches(ctx, c);
}

// 288 CTAs fill the GPU without splits for the tensor-core kernel (2 per SM), so each CTA walks a
// whole request: 2-token blocks put up to 650 pages in its range, past one table tile (256).
TEST(CudaPagedAttentionTest, LongUnsplitRangesRefillTheTableTile) {
  UP_CUDA_TEST_CONTEXT(ctx);
  PagedCase c;
  c.hq = 96;
  c.hkv = 96;
  c.d = 64;
  c.block_tokens = 2;
  c.seq_lens = {1100, 700, 1300};
  c.seed = 750;
  ExpectMatches(ctx, c);
}

TEST(CudaPagedAttentionTest, OneLongRequestIsSplitOverManyCtas) {
  UP_CUDA_TEST_CONTEXT(ctx);
  PagedCase c;
  c.hq = 32;
  c.hkv = 8;
  c.d = 128;
  c.block_tokens = 16;
  c.seq_lens = {32768};
  c.seed = 800;
  for (cuda::DecodeAttentionKernel k : kBothKernels) {
    c.kernel = k;
    const PagedResult r = RunPaged(ctx, c);
    EXPECT_GT(r.scratch_bytes, 0u) << "a single 32K-key request should be split";
    EXPECT_LT(ut::RelativeL2Error(r.out, r.ref), kBound) << c.Describe();
  }
}

// ---- PagedKvAppend ----

TEST(CudaPagedAttentionTest, AppendWritesExactlyTheMappedSlots) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(900);
  for (bool strided : {false, true}) {
    const int num_blocks = 9, bt = 16, kv_dim = 2 * 128;
    const int64_t row_stride = strided ? kv_dim + 8 : kv_dim;
    const int64_t v_off = strided ? bt * row_stride + 16 : bt * row_stride;
    const int64_t blk_stride = strided ? 2 * v_off + 24 : 2 * v_off;
    const int64_t pos_stride = strided ? bt + 3 : bt;
    const int R = 37;
    const int64_t src_stride = strided ? 3 * kv_dim : kv_dim;  // k / v as slices of a QKV row

    std::vector<uint16_t> pool(num_blocks * blk_stride);
    for (uint16_t& x : pool) x = static_cast<uint16_t>(rng());
    std::vector<int32_t> pos_pool(num_blocks * pos_stride);
    for (int32_t& x : pos_pool) x = static_cast<int32_t>(rng() % 1000);
    std::vector<uint16_t> k_new(R * src_stride), v_new(R * src_stride);
    for (uint16_t& x : k_new) x = static_cast<uint16_t>(rng());
    for (uint16_t& x : v_new) x = static_cast<uint16_t>(rng());
    std::vector<int32_t> all_slots(num_blocks * bt);
    std::iota(all_slots.begin(), all_slots.end(), 0);
    std::shuffle(all_slots.begin(), all_slots.end(), rng);
    std::vector<int32_t> slots(all_slots.begin(), all_slots.begin() + R);
    slots[5] = -1;  // padding rows are skipped
    slots[20] = -1;
    std::vector<int32_t> positions(R);
    for (int32_t& p : positions) p = static_cast<int32_t>(5000 + rng() % 1000);

    std::vector<uint16_t> want = pool;
    std::vector<int32_t> want_pos = pos_pool;
    for (int r = 0; r < R; ++r) {
      if (slots[r] < 0) continue;
      const int64_t blk = slots[r] / bt, off = slots[r] % bt;
      for (int e = 0; e < kv_dim; ++e) {
        want[blk * blk_stride + off * row_stride + e] = k_new[r * src_stride + e];
        want[blk * blk_stride + v_off + off * row_stride + e] = v_new[r * src_stride + e];
      }
      want_pos[blk * pos_stride + off] = positions[r];
    }

    DeviceBuffer d_pool = DeviceBuffer::FromHost(pool);
    DeviceBuffer d_pos = DeviceBuffer::FromHost(pos_pool);
    DeviceBuffer d_k = DeviceBuffer::FromHost(k_new);
    DeviceBuffer d_v = DeviceBuffer::FromHost(v_new);
    DeviceBuffer d_slots = DeviceBuffer::FromHost(slots);
    DeviceBuffer d_positions = DeviceBuffer::FromHost(positions);
    TensorView kv_view = TensorView::Contiguous(d_pool.data(), DType::kBF16,
                                                {num_blocks, 2, bt, kv_dim}, Device::kCuda);
    kv_view.stride = {blk_stride, v_off, row_stride, 1};
    TensorView pos_view =
        TensorView::Contiguous(d_pos.data(), DType::kI32, {num_blocks, bt}, Device::kCuda);
    pos_view.stride[0] = pos_stride;
    TensorView k_view =
        TensorView::Contiguous(d_k.data(), DType::kBF16, {R, kv_dim}, Device::kCuda);
    k_view.stride[0] = src_stride;
    TensorView v_view = k_view;
    v_view.data = d_v.data();
    cuda::PagedKvAppend(ctx, kv_view, pos_view, k_view, v_view, d_slots.as<int32_t>(),
                        d_positions.as<int32_t>());
    ctx.cuda().Synchronize();
    EXPECT_TRUE(d_pool.ToHost<uint16_t>(pool.size()) == want) << "strided " << strided;
    EXPECT_TRUE(d_pos.ToHost<int32_t>(pos_pool.size()) == want_pos) << "strided " << strided;

    // With a second coordinate (the CUDA cache's alive index, interleaved with the positions
    // as CudaKvPool's meta lays them out: [num_blocks, 2, block_tokens]): both written in the
    // same launch, everything else as before.
    std::vector<int32_t> meta(static_cast<size_t>(num_blocks) * 2 * bt);
    for (int32_t& x : meta) x = static_cast<int32_t>(rng() % 1000);
    std::vector<int32_t> indices(R);
    for (int32_t& x : indices) x = static_cast<int32_t>(rng() % 100000);
    std::vector<int32_t> want_meta = meta;
    for (int r = 0; r < R; ++r) {
      if (slots[r] < 0) continue;
      const int64_t blk = slots[r] / bt, off = slots[r] % bt;
      want_meta[blk * 2 * bt + off] = positions[r];
      want_meta[blk * 2 * bt + bt + off] = indices[r];
    }
    DeviceBuffer d_pool2 = DeviceBuffer::FromHost(pool);
    DeviceBuffer d_meta = DeviceBuffer::FromHost(meta);
    DeviceBuffer d_indices = DeviceBuffer::FromHost(indices);
    TensorView kv2 = kv_view;
    kv2.data = d_pool2.data();
    TensorView pos_plane =
        TensorView::Contiguous(d_meta.data(), DType::kI32, {num_blocks, bt}, Device::kCuda);
    pos_plane.stride[0] = 2 * bt;
    TensorView index_plane = pos_plane;
    index_plane.data = d_meta.as<int32_t>() + bt;
    cuda::PagedKvAppend(ctx, kv2, pos_plane, k_view, v_view, d_slots.as<int32_t>(),
                        d_positions.as<int32_t>(), index_plane, d_indices.as<int32_t>());
    ctx.cuda().Synchronize();
    EXPECT_TRUE(d_pool2.ToHost<uint16_t>(pool.size()) == want) << "with indices, strided " << strided;
    EXPECT_TRUE(d_meta.ToHost<int32_t>(meta.size()) == want_meta) << "strided " << strided;

    // Unaligned rows (kv_dim not a multiple of 8) take the scalar path.
    if (!strided) {
      const int odd_dim = 3 * 5;
      TensorView odd_pool = TensorView::Contiguous(d_pool.data(), DType::kBF16,
                                                   {num_blocks, 2, bt, odd_dim}, Device::kCuda);
      TensorView odd_k =
          TensorView::Contiguous(d_k.data(), DType::kBF16, {R, odd_dim}, Device::kCuda);
      TensorView odd_v = odd_k;
      odd_v.data = d_v.data();
      std::vector<uint16_t> want_odd = want;
      const int64_t odd_v_off = bt * odd_dim, odd_blk = 2 * odd_v_off;
      for (int r = 0; r < R; ++r) {
        if (slots[r] < 0) continue;
        const int64_t blk = slots[r] / bt, off = slots[r] % bt;
        for (int e = 0; e < odd_dim; ++e) {
          want_odd[blk * odd_blk + off * odd_dim + e] = k_new[r * odd_dim + e];
          want_odd[blk * odd_blk + odd_v_off + off * odd_dim + e] = v_new[r * odd_dim + e];
        }
      }
      cuda::PagedKvAppend(ctx, odd_pool, pos_view, odd_k, odd_v, d_slots.as<int32_t>(), nullptr);
      ctx.cuda().Synchronize();
      EXPECT_TRUE(d_pool.ToHost<uint16_t>(pool.size()) == want_odd) << "odd kv_dim";
      EXPECT_TRUE(d_pos.ToHost<int32_t>(pos_pool.size()) == want_pos) << "positions untouched";
    }
  }
}

// RopePagedKvAppend equals Rope then PagedKvAppend bit for bit: the rotated q and k heads left in
// the fused QKV rows, the pool's keys (rotated) and values, both slot coordinates; slots that
// skip their row still rotate it; both rope styles, full and partial rotary dims, the paired
// (bf16x2) and the scalar rotation, head dims 64 and 128, positions past 2^16.
TEST(CudaPagedAttentionTest, RopeAppendEqualsRopeThenAppend) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(901);
  struct Shape {
    int hq, hkv, d, rot_dims;
  };
  for (const Shape sh : {Shape{4, 2, 128, 128}, Shape{8, 2, 64, 32}, Shape{2, 1, 64, 6}}) {
    for (const RopeStyle style : {RopeStyle::kNeox, RopeStyle::kAdjacent}) {
      const int num_blocks = 7, bt = 16, R = 37;
      const int kv_dim = sh.hkv * sh.d;
      const int64_t width = static_cast<int64_t>(sh.hq + 2 * sh.hkv) * sh.d + 8;  // q | k | v | pad
      const int64_t blk_stride = 2 * bt * kv_dim;
      std::vector<uint16_t> qkv(R * width);
      for (uint16_t& x : qkv) {
        x = ut::F32ToBf16Bits(std::uniform_real_distribution<float>(-2, 2)(rng));
      }
      std::vector<uint16_t> pool(num_blocks * blk_stride);
      for (uint16_t& x : pool) x = static_cast<uint16_t>(rng());
      std::vector<int32_t> meta(static_cast<size_t>(num_blocks) * 2 * bt);
      for (int32_t& x : meta) x = static_cast<int32_t>(rng() % 1000);
      std::vector<int32_t> all_slots(num_blocks * bt);
      std::iota(all_slots.begin(), all_slots.end(), 0);
      std::shuffle(all_slots.begin(), all_slots.end(), rng);
      std::vector<int32_t> slots(all_slots.begin(), all_slots.begin() + R);
      slots[3] = -1;  // skipped, still rotated
      slots[30] = -1;
      std::vector<int32_t> pos(R), indices(R);
      for (int32_t& x : pos) x = static_cast<int32_t>(rng() % 140000);
      for (int32_t& x : indices) x = static_cast<int32_t>(rng() % 100000);
      std::vector<float> inv_freq(std::max(sh.rot_dims / 2, 1));
      for (size_t i = 0; i < inv_freq.size(); ++i) {
        inv_freq[i] = std::pow(500000.0f, -2.0f * static_cast<float>(i) / sh.rot_dims);
      }
      const DeviceBuffer d_slots = DeviceBuffer::FromHost(slots);
      const DeviceBuffer d_pos = DeviceBuffer::FromHost(pos);
      const DeviceBuffer d_indices = DeviceBuffer::FromHost(indices);
      const DeviceBuffer d_freq = DeviceBuffer::FromHost(inv_freq);
      // Run both ways on copies: [0] Rope then PagedKvAppend, [1] RopePagedKvAppend.
      std::vector<uint16_t> out_qkv[2], out_pool[2];
      std::vector<int32_t> out_meta[2];
      for (int fused = 0; fused < 2; ++fused) {
        DeviceBuffer d_qkv = DeviceBuffer::FromHost(qkv);
        DeviceBuffer d_pool = DeviceBuffer::FromHost(pool);
        DeviceBuffer d_meta = DeviceBuffer::FromHost(meta);
        const TensorView kv_view = TensorView::Contiguous(
            d_pool.data(), DType::kBF16, {num_blocks, 2, bt, kv_dim}, Device::kCuda);
        TensorView pos_plane =
            TensorView::Contiguous(d_meta.data(), DType::kI32, {num_blocks, bt}, Device::kCuda);
        pos_plane.stride[0] = 2 * bt;
        TensorView index_plane = pos_plane;
        index_plane.data = d_meta.as<int32_t>() + bt;
        TensorView qk = TensorView::Contiguous(d_qkv.data(), DType::kBF16,
                                               {R, sh.hq + sh.hkv, sh.d}, Device::kCuda);
        qk.stride[0] = width;
        const auto rows = [&](int64_t col) {
          TensorView t = TensorView::Contiguous(d_qkv.as<uint16_t>() + col, DType::kBF16,
                                                {R, kv_dim}, Device::kCuda);
          t.stride[0] = width;
          return t;
        };
        const TensorView k_rows = rows(int64_t{sh.hq} * sh.d);
        const TensorView v_rows = rows(int64_t{sh.hq + sh.hkv} * sh.d);
        if (fused) {
          cuda::RopePagedKvAppend(ctx, qk, sh.hkv, d_pos.as<int32_t>(), d_freq.as<float>(),
                                  sh.rot_dims, style, kv_view, pos_plane, v_rows,
                                  d_slots.as<int32_t>(), d_pos.as<int32_t>(), index_plane,
                                  d_indices.as<int32_t>());
        } else {
          cuda::Rope(ctx, qk, d_pos.as<int32_t>(), d_freq.as<float>(), sh.rot_dims, style);
          cuda::PagedKvAppend(ctx, kv_view, pos_plane, k_rows, v_rows, d_slots.as<int32_t>(),
                              d_pos.as<int32_t>(), index_plane, d_indices.as<int32_t>());
        }
        ctx.cuda().Synchronize();
        out_qkv[fused] = d_qkv.ToHost<uint16_t>(qkv.size());
        out_pool[fused] = d_pool.ToHost<uint16_t>(pool.size());
        out_meta[fused] = d_meta.ToHost<int32_t>(meta.size());
      }
      const std::string what = "hq " + std::to_string(sh.hq) + " hkv " + std::to_string(sh.hkv) +
                               " d " + std::to_string(sh.d) + " rot " +
                               std::to_string(sh.rot_dims) + " style " +
                               std::to_string(static_cast<int>(style));
      EXPECT_TRUE(out_qkv[1] == out_qkv[0]) << what;
      EXPECT_TRUE(out_pool[1] == out_pool[0]) << what;
      EXPECT_TRUE(out_meta[1] == out_meta[0]) << what;
      // And the rotation happened: the query heads changed.
      int64_t changed = 0;
      for (int64_t i = 0; i < static_cast<int64_t>(sh.hq) * sh.d; ++i) {
        changed += out_qkv[1][i] != qkv[i];
      }
      EXPECT_GT(changed, 0) << what;
    }
  }
}

TEST(CudaPagedAttentionTest, AppendThenDecodeSeesTheNewToken) {
  UP_CUDA_TEST_CONTEXT(ctx);
  // Two requests share a pool; each appends one token into the next free slot of its last block,
  // then decodes over everything: the result must equal the CPU attention over all the keys.
  std::mt19937 rng(1000);
  const int hq = 8, hkv = 2, D = 64, bt = 16, kv_dim = hkv * D, num_blocks = 6;
  const std::vector<int> old_lens = {20, 5};
  const std::vector<std::vector<int32_t>> tables = {{4, 1}, {3}};
  std::vector<uint16_t> pool(static_cast<size_t>(num_blocks) * 2 * bt * kv_dim, kNanBits);
  std::vector<int32_t> pos_pool(num_blocks * bt, 0);
  std::vector<std::vector<float>> keys(2), values(2);
  std::vector<std::vector<int32_t>> key_pos(2);
  for (int b = 0; b < 2; ++b) {
    for (int j = 0; j < old_lens[b]; ++j) {
      const int blk = tables[b][j / bt], off = j % bt;
      const std::vector<float> k = ut::RandomBf16Values(rng, kv_dim, -2, 2);
      const std::vector<float> v = ut::RandomBf16Values(rng, kv_dim, -2, 2);
      for (int e = 0; e < kv_dim; ++e) {
        pool[(static_cast<size_t>(blk) * 2 * bt + off) * kv_dim + e] = ut::F32ToBf16Bits(k[e]);
        pool[(static_cast<size_t>(blk) * 2 * bt + bt + off) * kv_dim + e] = ut::F32ToBf16Bits(v[e]);
      }
      pos_pool[blk * bt + off] = 2 * j;
      keys[b].insert(keys[b].end(), k.begin(), k.end());
      values[b].insert(values[b].end(), v.begin(), v.end());
      key_pos[b].push_back(2 * j);
    }
  }
  // The new token of each request.
  const std::vector<float> k_new = ut::RandomBf16Values(rng, 2 * kv_dim, -2, 2);
  const std::vector<float> v_new = ut::RandomBf16Values(rng, 2 * kv_dim, -2, 2);
  std::vector<int32_t> slots(2), positions(2), q_pos(2), seq_lens(2);
  for (int b = 0; b < 2; ++b) {
    const int j = old_lens[b];
    slots[b] = tables[b][j / bt] * bt + j % bt;
    positions[b] = q_pos[b] = 2 * j;
    seq_lens[b] = j + 1;
    keys[b].insert(keys[b].end(), k_new.begin() + b * kv_dim, k_new.begin() + (b + 1) * kv_dim);
    values[b].insert(values[b].end(), v_new.begin() + b * kv_dim, v_new.begin() + (b + 1) * kv_dim);
    key_pos[b].push_back(2 * j);
  }
  const std::vector<int32_t> table = {4, 1, 3, 0};  // [2, 2]; request 1's spare entry unused
  const std::vector<float> q = ut::RandomBf16Values(rng, 2 * hq * D, -2, 2);

  DeviceBuffer d_pool = DeviceBuffer::FromHost(pool), d_pos = DeviceBuffer::FromHost(pos_pool);
  DeviceBuffer d_k = DeviceBuffer::FromHost(ut::ToBf16(k_new));
  DeviceBuffer d_v = DeviceBuffer::FromHost(ut::ToBf16(v_new));
  DeviceBuffer d_slots = DeviceBuffer::FromHost(slots);
  DeviceBuffer d_positions = DeviceBuffer::FromHost(positions);
  DeviceBuffer d_table = DeviceBuffer::FromHost(table), d_seq = DeviceBuffer::FromHost(seq_lens);
  DeviceBuffer d_qpos = DeviceBuffer::FromHost(q_pos);
  DeviceBuffer d_q = DeviceBuffer::FromHost(ut::ToBf16(q));
  DeviceBuffer d_out(2 * hq * D * 2);
  d_out.Fill(0xFF);
  const TensorView kv_view = d_pool.View(DType::kBF16, {num_blocks, 2, bt, kv_dim});
  const TensorView pos_view = d_pos.View(DType::kI32, {num_blocks, bt});
  cuda::PagedKvAppend(ctx, kv_view, pos_view, d_k.View(DType::kBF16, {2, kv_dim}),
                      d_v.View(DType::kBF16, {2, kv_dim}), d_slots.as<int32_t>(),
                      d_positions.as<int32_t>());
  cuda::PagedDecodeBatch batch;
  batch.block_tables = d_table.as<int32_t>();
  batch.max_blocks_per_seq = 2;
  batch.seq_lens = d_seq.as<int32_t>();
  batch.q_pos = d_qpos.as<int32_t>();
  batch.max_seq_len = 21;
  AttentionParams params;
  params.scale = 0.125f;
  const size_t scratch_bytes = cuda::PagedDecodeAttentionScratchBytes(ctx, 2, hq, hkv, D, 21);
  DeviceBuffer scratch(std::max<size_t>(1, scratch_bytes));
  cuda::PagedDecodeAttention(ctx, d_out.View(DType::kBF16, {2, hq, D}),
                             d_q.View(DType::kBF16, {2, hq, D}), kv_view, pos_view, batch, params,
                             scratch.data(), scratch_bytes);
  ctx.cuda().Synchronize();
  const std::vector<float> out = ut::FromBf16(d_out.ToHost<uint16_t>(2 * hq * D));
  std::vector<float> ref(2 * hq * D);
  for (int b = 0; b < 2; ++b) {
    std::vector<float> qb(q.begin() + b * hq * D, q.begin() + (b + 1) * hq * D);
    const int64_t L = static_cast<int64_t>(key_pos[b].size());
    Attention(Cpu(), TensorView::Contiguous(ref.data() + b * hq * D, DType::kF32, {1, hq, D}),
              TensorView::Contiguous(qb.data(), DType::kF32, {1, hq, D}),
              TensorView::Contiguous(keys[b].data(), DType::kF32, {L, hkv, D}),
              TensorView::Contiguous(values[b].data(), DType::kF32, {L, hkv, D}), &q_pos[b],
              key_pos[b].data(), params);
  }
  EXPECT_LT(ut::RelativeL2Error(out, ref), kBound);
}

// Not a correctness test: the decode kernel's time and effective bandwidth (K + V bytes read per
// call over the time) on real models' head shapes, one warm-up and 5 timed calls each, printed for
// the performance notes. Contiguous block ids; random bf16 K/V made on the device.
TEST(CudaPagedAttentionTest, DecodeTimingReport) {
  UP_CUDA_TEST_CONTEXT(ctx);
  struct Shape {
    const char* name;
    int batch, seq, hq, hkv, d, bt;
  };
  const Shape shapes[] = {
      {"1 x 128K keys, Llama-3.1-8B heads (32 / 8 x 128)", 1, 131072, 32, 8, 128, 16},
      {"32 x 1K keys, Llama-3.1-8B heads", 32, 1024, 32, 8, 128, 16},
      {"4 x 32K keys, Llama-3.1-8B heads", 4, 32768, 32, 8, 128, 16},
      {"64 x 4K keys, Llama-3.1-8B heads", 64, 4096, 32, 8, 128, 16},
      {"1 x 128K keys, Gemma-3-270M heads (4 / 1 x 256)", 1, 131072, 4, 1, 256, 16},
      {"256 x 1K keys, 16 / 2 x 256 heads", 256, 1024, 16, 2, 256, 32},
      {"8 x 32K keys, 64 / 8 x 128 heads", 8, 32768, 64, 8, 128, 16},
  };
  for (const Shape& s : shapes) {
    const int pages = s.seq / s.bt, num_blocks = s.batch * pages, kv_dim = s.hkv * s.d;
    DeviceBuffer pool(static_cast<size_t>(num_blocks) * 2 * s.bt * kv_dim * 2);
    cuda::FillRandomBf16(ctx, pool.data(), static_cast<int64_t>(pool.size() / 2), 1, 1.0f);
    std::vector<int32_t> pos(static_cast<size_t>(num_blocks) * s.bt), table(num_blocks);
    for (int i = 0; i < num_blocks; ++i) {
      table[i] = i;
      for (int o = 0; o < s.bt; ++o)
        pos[static_cast<size_t>(i) * s.bt + o] = (i % pages) * s.bt + o;
    }
    DeviceBuffer d_pos = DeviceBuffer::FromHost(pos), d_table = DeviceBuffer::FromHost(table);
    DeviceBuffer d_seq = DeviceBuffer::FromHost(std::vector<int32_t>(s.batch, s.seq));
    DeviceBuffer d_qpos = DeviceBuffer::FromHost(std::vector<int32_t>(s.batch, s.seq - 1));
    DeviceBuffer q(static_cast<size_t>(s.batch) * s.hq * s.d * 2), out(q.size());
    cuda::FillRandomBf16(ctx, q.data(), static_cast<int64_t>(q.size() / 2), 2, 1.0f);
    cuda::PagedDecodeBatch batch;
    batch.block_tables = d_table.as<int32_t>();
    batch.max_blocks_per_seq = pages;
    batch.seq_lens = d_seq.as<int32_t>();
    batch.q_pos = d_qpos.as<int32_t>();
    batch.max_seq_len = s.seq;
    AttentionParams params;
    params.scale = 1.0f / std::sqrt(static_cast<float>(s.d));
    const TensorView kv_view = pool.View(DType::kBF16, {num_blocks, 2, s.bt, kv_dim});
    const TensorView pos_view = d_pos.View(DType::kI32, {num_blocks, s.bt});
    const TensorView q_view = q.View(DType::kBF16, {s.batch, s.hq, s.d});
    const TensorView out_view = out.View(DType::kBF16, {s.batch, s.hq, s.d});
    double us_by_kernel[2] = {0, 0};
    for (int ki = 0; ki < 2; ++ki) {
      const cuda::DecodeAttentionKernel kernel = kBothKernels[ki];
      const size_t scratch_bytes = cuda::PagedDecodeAttentionScratchBytes(
          ctx, s.batch, s.hq, s.hkv, s.d, s.seq, kernel);
      DeviceBuffer scratch(std::max<size_t>(scratch_bytes, 16));
      const auto run = [&] {
        cuda::PagedDecodeAttention(ctx, out_view, q_view, kv_view, pos_view, batch, params,
                                   scratch.data(), scratch_bytes, kernel);
      };
      const double us = 1000.0 * ::uniprefill::testing::MeanCudaMs(ctx, 5, run);
      us_by_kernel[ki] = us;
      const double bytes = static_cast<double>(s.batch) * s.seq * kv_dim * 2 * 2;
      std::printf("[ timing ] PagedDecodeAttention %s, %s: %.1f us, %.0f GB/s (scratch %zu)\n",
                  KernelName(kernel), s.name, us, bytes / us * 1e-3, scratch_bytes);
      const std::vector<uint16_t> bits = out.ToHost<uint16_t>(out.size() / 2);
      for (uint16_t b : bits) ASSERT_TRUE(std::isfinite(ut::Bf16BitsToF32(b))) << s.name;
    }
    std::printf("[ timing ] %s: cuda-cores / tensor-cores %.2fx\n", s.name,
                us_by_kernel[1] / us_by_kernel[0]);
  }
}

}  // namespace
}  // namespace uniprefill::ops
