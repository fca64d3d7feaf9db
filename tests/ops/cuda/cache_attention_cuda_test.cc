// CacheAttention (ops/cuda/cuda_cache_attention.h) vs the CPU ops::Attention (f32, on the same
// bf16-rounded inputs, each request's keys gathered from its blocks in table order on the host).
// Shapes: head dims 16, 32, 40, 64, 72, 128, 256 (also 8, 24, 48, 136, 248), block sizes 16 and 64
// (also 8, 128), GQA 1, 2, 4 (and 3, 32); batches that mix decode rows (q_len 1), several rows per
// request over keys already in the cache (query coordinates = the coordinates of the request's last
// q_len keys, i.e. continuing the cache), q_len 0 requests, a request with rows but no keys, gaps
// between the requests' rows, sliding windows with released (negative) pages, non-consecutive
// coordinates (the positions jump by 1..5 at random, as after a UniPrefill drop), query
// coordinates after, among (unsorted) or before the keys, strided q ([query | gate] heads, head
// stride 2D, in a fused row) and out, padded pool layouts and an unaligned pool and q / out (odd
// strides and offsets: the element-wise load path).
// Poison: every pool slot that holds no key, the spare table entries' block and released pages hold
// bf16 NaN, and out starts as 0xFF bytes (NaN): covered rows must match the reference (NaN never
// passes RelativeL2Error), and rows not covered by any request (gaps, q_len 0 requests, the tail)
// and the padding between out rows must still be NaN afterwards.
// Bound: normalised error ||out - ref|| / ||ref|| < 1e-2 over all covered rows (the bf16 output
// alone rounds by ~3e-3 relative), as for PagedDecodeAttention.
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
#include "ops/cuda/cuda_cache_attention.h"
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

enum class QueryCoord {
  kTail,       // row r: the coordinate of key seq_len - q_len + r (the step's new tokens)
  kAfterLast,  // last key's coordinate + 1 + r (keys all in the past)
  kRandom,     // random coordinates between first - 2 and last + 2, unsorted
  kBeforeAll,  // below every key: nothing visible, zeros out
};

struct CacheCase {
  int hq = 8, hkv = 2, d = 128, block_tokens = 16, window = 0;
  std::vector<int> seq_lens;  // keys per request
  std::vector<int> q_lens;    // query rows per request
  QueryCoord query = QueryCoord::kTail;
  bool gaps = true;            // coordinates jump by 1..5 at random (UniPrefill drops)
  bool release_pages = false;  // pages wholly behind every row's window become -1
  bool strided = false;        // padded pool, [query | gate] q heads in a fused row, padded out
  bool unaligned = false;      // odd pool strides and q / out offsets: element-wise loads
  uint32_t seed = 1;

  std::string Describe() const {
    std::ostringstream s;
    s << "hq " << hq << " hkv " << hkv << " d " << d << " bt " << block_tokens << " window "
      << window << " query " << static_cast<int>(query) << " gaps " << gaps << " release "
      << release_pages << " strided " << strided << " unaligned " << unaligned << " (seq, q):";
    for (size_t b = 0; b < seq_lens.size(); ++b) {
      s << " (" << seq_lens[b] << ", " << q_lens[b] << ")";
    }
    return s.str();
  }
};

struct CacheResult {
  std::vector<float> out;  // covered rows' outputs, f32 [rows, Hq, D] in request order
  std::vector<float> ref;  // the same rows from ops::Attention
  int64_t poison_broken = 0;  // out elements outside the covered rows that are no longer NaN
  int64_t covered_rows = 0;
};

CacheResult RunCache(DeviceContext& ctx, const CacheCase& c) {
  std::mt19937 rng(c.seed);
  const int B = static_cast<int>(c.seq_lens.size());
  const int D = c.d, bt = c.block_tokens, kv_dim = c.hkv * c.d;
  // Pool strides (elements).
  int64_t row_stride = kv_dim, v_off = static_cast<int64_t>(bt) * kv_dim, blk_stride = 2 * v_off;
  int64_t coord_stride = bt;
  if (c.strided) {
    row_stride = kv_dim + 8;
    v_off = bt * row_stride + 16;
    blk_stride = 2 * v_off + 24;
    coord_stride = bt + 5;
  }
  if (c.unaligned) {
    row_stride = kv_dim + 3;
    v_off = bt * row_stride + 5;
    blk_stride = 2 * v_off + 7;
    coord_stride = bt + 3;
  }

  // Key coordinates.
  std::vector<std::vector<int32_t>> coord(B);
  for (int b = 0; b < B; ++b) {
    std::uniform_int_distribution<int> gap(1, 5), coin(0, 3);
    int32_t p = coin(rng);
    for (int j = 0; j < c.seq_lens[b]; ++j) {
      coord[b].push_back(p);
      p += (c.gaps && coin(rng) == 0) ? gap(rng) : 1;
    }
  }
  // Query rows: request b's rows start after a gap of 0..2 unused rows; 3 unused rows at the end.
  std::vector<int32_t> q_start(B), q_len(c.q_lens.begin(), c.q_lens.end());
  int64_t tq = 0;
  for (int b = 0; b < B; ++b) {
    tq += rng() % 3;
    q_start[b] = static_cast<int32_t>(tq);
    tq += q_len[b];
  }
  tq += 3;
  std::vector<int32_t> q_coord(tq, -12345);
  std::vector<int32_t> min_qc(B, INT32_MAX);
  for (int b = 0; b < B; ++b) {
    const int L = c.seq_lens[b], n = q_len[b];
    const int32_t first = L > 0 ? coord[b][0] : 0, last = L > 0 ? coord[b][L - 1] : 0;
    for (int r = 0; r < n; ++r) {
      int32_t qc = 0;
      switch (c.query) {
        case QueryCoord::kTail: {
          const int j = L - n + r;  // rows past the keys' start get coordinates below them
          qc = j >= 0 ? coord[b][j] : (L > 0 ? first - (n - L - r) : r);
          break;
        }
        case QueryCoord::kAfterLast:
          qc = last + 1 + r;
          break;
        case QueryCoord::kRandom:
          qc = first - 2 + static_cast<int32_t>(rng() % (last - first + 5));
          break;
        case QueryCoord::kBeforeAll:
          qc = first - 1 - r;
          break;
      }
      q_coord[q_start[b] + r] = qc;
      min_qc[b] = std::min(min_qc[b], qc);
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
  std::vector<int32_t> table(static_cast<size_t>(std::max(B, 1)) * max_blocks, poison_block);

  std::vector<uint16_t> pool(static_cast<size_t>(num_blocks) * blk_stride + 16, kNanBits);
  std::vector<int32_t> coord_pool(static_cast<size_t>(num_blocks) * coord_stride + 8, 0);
  std::vector<std::vector<float>> keys(B), values(B);
  std::vector<std::vector<int32_t>> key_coord(B);
  const int64_t pool_base = c.unaligned ? 1 : 0;  // element offset of the pool view's data
  int next = 0;
  for (int b = 0; b < B; ++b) {
    const int L = c.seq_lens[b];
    for (int pg = 0; pg < pages[b]; ++pg) {
      const int blk = ids[next++];
      const int first = pg * bt, count = std::min(bt, L - first);
      const int64_t last_coord = coord[b][first + count - 1];
      const bool released = c.release_pages && c.window > 0 && q_len[b] > 0 &&
                            last_coord <= static_cast<int64_t>(min_qc[b]) - c.window;
      table[static_cast<size_t>(b) * max_blocks + pg] = released ? -1 : blk;
      for (int o = 0; o < count; ++o) {
        coord_pool[blk * coord_stride + o] = coord[b][first + o];
        if (released) continue;  // stays NaN: the kernel must not read the block
        const std::vector<float> k = ut::RandomBf16Values(rng, kv_dim, -2.0f, 2.0f);
        const std::vector<float> v = ut::RandomBf16Values(rng, kv_dim, -2.0f, 2.0f);
        for (int e = 0; e < kv_dim; ++e) {
          pool[pool_base + blk * blk_stride + o * row_stride + e] = ut::F32ToBf16Bits(k[e]);
          pool[pool_base + blk * blk_stride + v_off + o * row_stride + e] =
              ut::F32ToBf16Bits(v[e]);
        }
        keys[b].insert(keys[b].end(), k.begin(), k.end());
        values[b].insert(values[b].end(), v.begin(), v.end());
        key_coord[b].push_back(coord[b][first + o]);
      }
    }
  }

  // q: plain [Tq, Hq, D], or heads [query | gate] (head stride 2D) inside a fused QKV-like row.
  const int64_t q_head = c.strided ? 2 * D : D;
  const int64_t q_row = c.strided ? 2 * c.hq * D + 2 * kv_dim + 8 : c.hq * D;
  const int64_t o_row = c.strided || c.unaligned ? c.hq * D + 8 : c.hq * D;
  const int64_t io_base = c.unaligned ? 3 : 0;  // odd element offset of q and out
  std::vector<float> q_host = ut::RandomBf16Values(rng, static_cast<size_t>(tq * q_row + 8), -2, 2);

  DeviceBuffer d_pool = DeviceBuffer::FromHost(pool);
  DeviceBuffer d_coord = DeviceBuffer::FromHost(coord_pool);
  DeviceBuffer d_table = DeviceBuffer::FromHost(table);
  DeviceBuffer d_seq = DeviceBuffer::FromHost(c.seq_lens);
  DeviceBuffer d_qstart = DeviceBuffer::FromHost(q_start);
  DeviceBuffer d_qlen = DeviceBuffer::FromHost(q_len);
  DeviceBuffer d_qcoord = DeviceBuffer::FromHost(q_coord);
  DeviceBuffer d_q = DeviceBuffer::FromHost(ut::ToBf16(q_host));
  const size_t out_elems = static_cast<size_t>(tq * o_row + io_base + 8);
  DeviceBuffer d_out(out_elems * 2);
  d_out.Fill(0xFF);

  TensorView kv_view = TensorView::Contiguous(d_pool.as<uint16_t>() + pool_base, DType::kBF16,
                                              {num_blocks, 2, bt, kv_dim}, Device::kCuda);
  kv_view.stride = {blk_stride, v_off, row_stride, 1};
  TensorView coord_view =
      TensorView::Contiguous(d_coord.data(), DType::kI32, {num_blocks, bt}, Device::kCuda);
  coord_view.stride[0] = coord_stride;
  TensorView q_view = TensorView::Contiguous(d_q.as<uint16_t>() + io_base, DType::kBF16,
                                             {tq, c.hq, D}, Device::kCuda);
  q_view.stride = {q_row, q_head, 1};
  TensorView out_view = TensorView::Contiguous(d_out.as<uint16_t>() + io_base, DType::kBF16,
                                               {tq, c.hq, D}, Device::kCuda);
  out_view.stride[0] = o_row;

  cuda::CacheAttentionBatch batch;
  batch.q_start = d_qstart.as<int32_t>();
  batch.q_len = d_qlen.as<int32_t>();
  batch.q_coord = d_qcoord.as<int32_t>();
  batch.block_tables = d_table.as<int32_t>();
  batch.max_blocks_per_seq = max_blocks;
  batch.seq_lens = d_seq.as<int32_t>();
  batch.batch = B;
  batch.max_q_len = B > 0 ? *std::max_element(q_len.begin(), q_len.end()) : 0;
  batch.max_seq_len = B > 0 ? *std::max_element(c.seq_lens.begin(), c.seq_lens.end()) : 0;
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(D));
  params.window = c.window;

  cuda::CacheAttention(ctx, out_view, q_view, kv_view, coord_view, batch, params);
  ctx.cuda().Synchronize();
  const std::vector<uint16_t> out_bits = d_out.ToHost<uint16_t>(out_elems);

  CacheResult r;
  std::vector<char> covered(tq, 0);
  for (int b = 0; b < B; ++b) {
    const int n = q_len[b];
    if (n == 0) continue;
    for (int i = 0; i < n; ++i) covered[q_start[b] + i] = 1;
    r.covered_rows += n;
    std::vector<float> qb(static_cast<size_t>(n) * c.hq * D);
    for (int i = 0; i < n; ++i) {
      for (int h = 0; h < c.hq; ++h) {
        for (int e = 0; e < D; ++e) {
          qb[(static_cast<size_t>(i) * c.hq + h) * D + e] =
              q_host[io_base + (q_start[b] + i) * q_row + h * q_head + e];
          r.out.push_back(
              ut::Bf16BitsToF32(out_bits[io_base + (q_start[b] + i) * o_row + h * D + e]));
        }
      }
    }
    std::vector<float> ref(qb.size(), 0.0f);
    const int64_t L = static_cast<int64_t>(key_coord[b].size());
    if (L > 0) {
      Attention(Cpu(), TensorView::Contiguous(ref.data(), DType::kF32, {n, c.hq, D}),
                TensorView::Contiguous(qb.data(), DType::kF32, {n, c.hq, D}),
                TensorView::Contiguous(keys[b].data(), DType::kF32, {L, c.hkv, D}),
                TensorView::Contiguous(values[b].data(), DType::kF32, {L, c.hkv, D}),
                &q_coord[q_start[b]], key_coord[b].data(), params);
    }
    r.ref.insert(r.ref.end(), ref.begin(), ref.end());
  }
  // Everything outside the covered rows' [Hq, D] blocks must still be poison.
  for (size_t i = 0; i < out_elems; ++i) {
    const int64_t rel = static_cast<int64_t>(i) - io_base;
    const bool inside = rel >= 0 && rel / o_row < tq && covered[rel / o_row] &&
                        rel % o_row < static_cast<int64_t>(c.hq) * D;
    if (!inside && out_bits[i] != 0xFFFF) ++r.poison_broken;
  }
  return r;
}

void ExpectMatches(DeviceContext& ctx, const CacheCase& c) {
  const CacheResult r = RunCache(ctx, c);
  EXPECT_LT(ut::RelativeL2Error(r.out, r.ref), kBound) << c.Describe();
  EXPECT_EQ(r.poison_broken, 0) << "elements written outside the covered rows: " << c.Describe();
}

// A mixed batch: decode rows, multi-row steps over cached keys, q_len 0, rows without keys.
const std::vector<int> kMixedSeq = {1, 17, 100, 300, 50, 0, 1000, 64};
const std::vector<int> kMixedQ = {1, 5, 33, 1, 0, 2, 64, 64};

TEST(CudaCacheAttentionTest, MatchesCpuOverHeadDimsGroupsAndBlockSizes) {
  UP_CUDA_TEST_CONTEXT(ctx);
  uint32_t seed = 1;
  const int dims[] = {16, 32, 40, 64, 72, 128, 256};
  const int groups[] = {1, 2, 4};
  for (int di = 0; di < 7; ++di) {
    for (int gi = 0; gi < 3; ++gi) {
      CacheCase c;
      c.hkv = 2;
      c.hq = 2 * groups[gi];
      c.d = dims[di];
      c.block_tokens = (di + gi) % 2 == 0 ? 16 : 64;
      c.seq_lens = kMixedSeq;
      c.q_lens = kMixedQ;
      c.seed = seed++;
      ExpectMatches(ctx, c);
    }
  }
}

TEST(CudaCacheAttentionTest, SmallestAndOddHeadDims) {
  UP_CUDA_TEST_CONTEXT(ctx);
  uint32_t seed = 50;
  for (int d : {8, 24, 48, 136, 248}) {
    for (int bt : {8, 16, 64, 128}) {
      CacheCase c;
      c.hq = 6;
      c.hkv = 2;  // group 3
      c.d = d;
      c.block_tokens = bt;
      c.seq_lens = {1, 40, 200};
      c.q_lens = {1, 7, 20};
      c.seed = seed++;
      ExpectMatches(ctx, c);
    }
  }
}

TEST(CudaCacheAttentionTest, DecodeOnlyBatches) {
  UP_CUDA_TEST_CONTEXT(ctx);
  uint32_t seed = 100;
  for (int d : {16, 32, 64, 128, 256}) {
    for (int group : {1, 2, 4}) {
      CacheCase c;
      c.hkv = 4;
      c.hq = 4 * group;
      c.d = d;
      c.block_tokens = d >= 128 ? 64 : 16;
      c.seq_lens = {1, 15, 16, 17, 100, 1000, 3000, 0};
      c.q_lens = {1, 1, 1, 1, 1, 1, 1, 0};
      c.seed = seed++;
      ExpectMatches(ctx, c);
    }
  }
}

TEST(CudaCacheAttentionTest, ManyRowsOverALongCache) {
  UP_CUDA_TEST_CONTEXT(ctx);
  uint32_t seed = 200;
  for (int d : {32, 128}) {
    for (int group : {1, 4}) {
      CacheCase c;
      c.hkv = 2;
      c.hq = 2 * group;
      c.d = d;
      c.block_tokens = 16;
      c.seq_lens = {2500, 700};
      c.q_lens = {300, 1};
      c.seed = seed++;
      ExpectMatches(ctx, c);
    }
  }
  // A large group (32 query heads on one kv head) and many heads in one CTA.
  CacheCase c;
  c.hq = 32;
  c.hkv = 1;
  c.d = 64;
  c.block_tokens = 64;
  c.seq_lens = {600, 5};
  c.q_lens = {40, 5};
  c.seed = seed++;
  ExpectMatches(ctx, c);
}

TEST(CudaCacheAttentionTest, SlidingWindowWithReleasedPages) {
  UP_CUDA_TEST_CONTEXT(ctx);
  uint32_t seed = 300;
  for (int d : {16, 64, 128, 72}) {
    for (bool release : {false, true}) {
      CacheCase c;
      c.hq = 8;
      c.hkv = 2;
      c.d = d;
      c.block_tokens = d == 72 ? 64 : 16;
      c.window = 48;
      c.release_pages = release;
      c.seq_lens = {1, 17, 100, 300, 1000, 2000};
      c.q_lens = {1, 3, 1, 20, 1, 40};
      c.seed = seed++;
      ExpectMatches(ctx, c);
    }
  }
}

TEST(CudaCacheAttentionTest, ConsecutiveAndGappedCoordinates) {
  UP_CUDA_TEST_CONTEXT(ctx);
  uint32_t seed = 400;
  for (bool gaps : {false, true}) {
    for (int window : {0, 32}) {
      CacheCase c;
      c.hq = 4;
      c.hkv = 2;
      c.d = 32;
      c.block_tokens = 16;
      c.gaps = gaps;
      c.window = window;
      c.seq_lens = kMixedSeq;
      c.q_lens = kMixedQ;
      c.seed = seed++;
      ExpectMatches(ctx, c);
    }
  }
}

TEST(CudaCacheAttentionTest, QueriesAfterAndAmongTheKeys) {
  UP_CUDA_TEST_CONTEXT(ctx);
  uint32_t seed = 500;
  for (QueryCoord qc : {QueryCoord::kAfterLast, QueryCoord::kRandom}) {
    for (int window : {0, 40}) {
      CacheCase c;
      c.hq = 8;
      c.hkv = 4;
      c.d = 64;
      c.block_tokens = 64;
      c.window = window;
      c.query = qc;
      c.seq_lens = {1, 17, 100, 300, 1000};
      c.q_lens = {2, 5, 16, 33, 9};
      c.seed = seed++;
      ExpectMatches(ctx, c);
    }
  }
}

TEST(CudaCacheAttentionTest, NoVisibleKeyGivesZeros) {
  UP_CUDA_TEST_CONTEXT(ctx);
  CacheCase c;
  c.hq = 8;
  c.hkv = 2;
  c.d = 40;
  c.query = QueryCoord::kBeforeAll;
  c.seq_lens = {1, 17, 1000, 0};
  c.q_lens = {1, 4, 20, 3};
  c.seed = 600;
  const CacheResult r = RunCache(ctx, c);
  ASSERT_EQ(r.out.size(), static_cast<size_t>(r.covered_rows) * c.hq * c.d);
  for (size_t i = 0; i < r.out.size(); ++i) ASSERT_EQ(r.out[i], 0.0f) << "element " << i;
  EXPECT_EQ(r.poison_broken, 0);
}

TEST(CudaCacheAttentionTest, StridedAndUnalignedLayouts) {
  UP_CUDA_TEST_CONTEXT(ctx);
  uint32_t seed = 700;
  for (int d : {16, 40, 128, 256}) {
    for (int mode = 0; mode < 2; ++mode) {
      CacheCase c;
      c.hq = 12;  // group 3
      c.hkv = 4;
      c.d = d;
      c.block_tokens = 16;
      c.strided = mode == 0;
      c.unaligned = mode == 1;
      c.window = d == 40 ? 24 : 0;
      c.release_pages = d == 40;
      c.seq_lens = kMixedSeq;
      c.q_lens = kMixedQ;
      c.seed = seed++;
      ExpectMatches(ctx, c);
    }
  }
}

TEST(CudaCacheAttentionTest, EmptyBatchesAreNoOps) {
  UP_CUDA_TEST_CONTEXT(ctx);
  CacheCase c;
  c.hq = 4;
  c.hkv = 2;
  c.d = 32;
  c.seq_lens = {10, 0, 30};
  c.q_lens = {0, 0, 0};
  c.seed = 800;
  const CacheResult r = RunCache(ctx, c);
  EXPECT_EQ(r.covered_rows, 0);
  EXPECT_EQ(r.poison_broken, 0);
}

// Not a correctness test: a decode batch of 8 requests x 8K keys, Hq 16 / Hkv 8, D 128 through
// CacheAttention and PagedDecodeAttention (same pool and positions), and a 512-row step over an 8K
// cache, one warm-up and 10 timed calls each, printed for the performance notes.
TEST(CudaCacheAttentionTest, DISABLED_DecodeTimingVsPagedDecode) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const int B = 8, seq = 8192, hq = 16, hkv = 8, D = 128, bt = 16;
  const int pages = seq / bt, num_blocks = B * pages, kv_dim = hkv * D;
  DeviceBuffer pool(static_cast<size_t>(num_blocks) * 2 * bt * kv_dim * 2);
  cuda::FillRandomBf16(ctx, pool.data(), static_cast<int64_t>(pool.size() / 2), 1, 1.0f);
  std::vector<int32_t> pos(static_cast<size_t>(num_blocks) * bt), table(num_blocks);
  for (int i = 0; i < num_blocks; ++i) {
    table[i] = i;
    for (int o = 0; o < bt; ++o) pos[static_cast<size_t>(i) * bt + o] = (i % pages) * bt + o;
  }
  DeviceBuffer d_pos = DeviceBuffer::FromHost(pos), d_table = DeviceBuffer::FromHost(table);
  DeviceBuffer d_seq = DeviceBuffer::FromHost(std::vector<int32_t>(B, seq));
  DeviceBuffer d_qpos = DeviceBuffer::FromHost(std::vector<int32_t>(B, seq - 1));
  std::vector<int32_t> q_start(B);
  std::iota(q_start.begin(), q_start.end(), 0);
  DeviceBuffer d_qstart = DeviceBuffer::FromHost(q_start);
  DeviceBuffer d_qlen = DeviceBuffer::FromHost(std::vector<int32_t>(B, 1));
  DeviceBuffer q(static_cast<size_t>(B) * hq * D * 2), out(q.size()), out2(q.size());
  cuda::FillRandomBf16(ctx, q.data(), static_cast<int64_t>(q.size() / 2), 2, 1.0f);
  const TensorView kv_view = pool.View(DType::kBF16, {num_blocks, 2, bt, kv_dim});
  const TensorView pos_view = d_pos.View(DType::kI32, {num_blocks, bt});
  const TensorView q_view = q.View(DType::kBF16, {B, hq, D});
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(D));
  const double bytes = static_cast<double>(B) * seq * kv_dim * 2 * 2;

  cuda::CacheAttentionBatch cb;
  cb.q_start = d_qstart.as<int32_t>();
  cb.q_len = d_qlen.as<int32_t>();
  cb.q_coord = d_qpos.as<int32_t>();
  cb.block_tables = d_table.as<int32_t>();
  cb.max_blocks_per_seq = pages;
  cb.seq_lens = d_seq.as<int32_t>();
  cb.batch = B;
  cb.max_q_len = 1;
  cb.max_seq_len = seq;
  const double us_cache = 1000.0 * ut::MeanCudaMs(ctx, 10, [&] {
    cuda::CacheAttention(ctx, out.View(DType::kBF16, {B, hq, D}), q_view, kv_view, pos_view, cb,
                         params);
  });

  cuda::PagedDecodeBatch pb;
  pb.block_tables = d_table.as<int32_t>();
  pb.max_blocks_per_seq = pages;
  pb.seq_lens = d_seq.as<int32_t>();
  pb.q_pos = d_qpos.as<int32_t>();
  pb.max_seq_len = seq;
  const size_t scratch_bytes = cuda::PagedDecodeAttentionScratchBytes(ctx, B, hq, hkv, D, seq);
  DeviceBuffer scratch(std::max<size_t>(scratch_bytes, 16));
  const double us_paged = 1000.0 * ut::MeanCudaMs(ctx, 10, [&] {
    cuda::PagedDecodeAttention(ctx, out2.View(DType::kBF16, {B, hq, D}), q_view, kv_view,
                               pos_view, pb, params, scratch.data(), scratch_bytes);
  });
  std::printf("[ timing ] decode 8 x 8K keys, 16 / 8 x 128 heads: CacheAttention %.1f us "
              "(%.0f GB/s), PagedDecodeAttention %.1f us (%.0f GB/s)\n",
              us_cache, bytes / us_cache * 1e-3, us_paged, bytes / us_paged * 1e-3);
  const std::vector<float> a = ut::FromBf16(out.ToHost<uint16_t>(out.size() / 2));
  const std::vector<float> p = ut::FromBf16(out2.ToHost<uint16_t>(out2.size() / 2));
  const double diff = ut::RelativeL2Error(a, p);
  std::printf("[ timing ] CacheAttention vs PagedDecodeAttention normalised difference %.2e\n",
              diff);
  EXPECT_LT(diff, kBound);

  // One request's 512-row step over its 8K keys (the last 512 slots are the step's own tokens).
  const int rows = 512;
  std::vector<int32_t> qc(rows);
  for (int i = 0; i < rows; ++i) qc[i] = seq - rows + i;
  DeviceBuffer d_qc = DeviceBuffer::FromHost(qc);
  DeviceBuffer d_one_start = DeviceBuffer::FromHost(std::vector<int32_t>{0});
  DeviceBuffer d_one_len = DeviceBuffer::FromHost(std::vector<int32_t>{rows});
  DeviceBuffer q2(static_cast<size_t>(rows) * hq * D * 2), out3(q2.size());
  cuda::FillRandomBf16(ctx, q2.data(), static_cast<int64_t>(q2.size() / 2), 3, 1.0f);
  cuda::CacheAttentionBatch pre = cb;
  pre.q_start = d_one_start.as<int32_t>();
  pre.q_len = d_one_len.as<int32_t>();
  pre.q_coord = d_qc.as<int32_t>();
  pre.batch = 1;
  pre.max_q_len = rows;
  const double flops = 4.0 * hq * D * (static_cast<double>(rows) * (seq - rows) +
                                       0.5 * static_cast<double>(rows) * rows);
  const double us_pre = 1000.0 * ut::MeanCudaMs(ctx, 10, [&] {
    cuda::CacheAttention(ctx, out3.View(DType::kBF16, {rows, hq, D}),
                         q2.View(DType::kBF16, {rows, hq, D}), kv_view, pos_view, pre, params);
  });
  std::printf("[ timing ] CacheAttention 512 rows over 8K keys, 16 / 8 x 128 heads: %.1f us "
              "(%.1f TFLOP/s useful)\n",
              us_pre, flops / us_pre * 1e-6);
}

}  // namespace
}  // namespace uniprefill::ops
