// A dense prefill in chunks reads each chunk's cached prefix in place (issue 18): told the
// prefill's length (SequenceCache::ExpectPrefill, as serve and bench gpu-prefill do), the CUDA
// cache lays every full-attention layer out in one run of pool blocks, and cuDNN's prefix
// attention reads those rows where they are instead of a copy (GatherCacheRows). The same data,
// offsets and graphs: the logits of the chunked prefill and of the decodes after it equal the
// copying run's bit for bit, with split-KV on (the default) and off. The tiny Gemma 3 GGUF (head
// dim 128, one full-attention layer of six) with cuDNN attention, and without cuDNN on our Hopper
// kernel. Its one full-attention layer is its last, where the default walk attends only each
// request's last row, as a decode (QueryRows::kLastOfEach): these tests load it with the last
// layer over every row (LoadOptions::last_layer_every_row), so that the chunks' prefix attention
// runs there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_kv_cache.h"
#include "model/model.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/sm90/flash_attention_wgmma.h"
#include "testing/cuda_test_util.h"
#include "testing/tiny_gemma3.h"

namespace uniprefill {
namespace {

struct ChunkedRun {
  std::vector<std::vector<float>> logits;  // the prefill's, then each decode's
  int in_place = 0, split = 0;             // ForwardStats over the run
  int head_rows = 0;                       // over the prefill's chunks: the last one's row only
  int contiguous_pages = 0, pages = 0;     // of the full-attention layer after the prefill
};

ChunkedRun RunChunked(Model& m, DeviceContext& ctx, const std::vector<int32_t>& prompt, int chunk,
                      bool in_place) {
  ChunkedRun run;
  auto cache = m.NewCache(static_cast<int>(prompt.size()) + 8, {});
  if (in_place) cache->ExpectPrefill(static_cast<int>(prompt.size()), true);
  const UniPrefillConfig dense;
  ForwardStats stats;
  std::vector<float> logits(m.config().vocab_size);
  for (size_t at = 0; at < prompt.size(); at += chunk) {
    const size_t n = std::min(prompt.size() - at, static_cast<size_t>(chunk));
    const bool last = at + n == prompt.size();
    SequenceStep s{cache.get(), std::span<const int32_t>(prompt.data() + at, n),
                   last ? logits.data() : nullptr, nullptr};
    EXPECT_TRUE(m.ForwardBatch(ctx, std::span<const SequenceStep>(&s, 1), dense, nullptr, &stats)
                    .ok());
  }
  run.logits.push_back(logits);
  for (int step = 0; step < 4; ++step) {
    const int32_t next[1] = {static_cast<int32_t>(
        std::max_element(logits.begin(), logits.end()) - logits.begin())};
    SequenceStep d{cache.get(), next, logits.data(), nullptr};
    EXPECT_TRUE(m.ForwardBatch(ctx, std::span<const SequenceStep>(&d, 1), dense).ok());
    run.logits.push_back(logits);
  }
  run.in_place = stats.prefix_reads_in_place;
  run.split = stats.split_prefix_attentions;
  run.head_rows = stats.head_rows;
  const auto* device_cache = dynamic_cast<const CudaSequenceCache*>(cache.get());
  EXPECT_NE(device_cache, nullptr);
  for (int layer = 0; device_cache && layer < m.config().n_layers; ++layer) {
    if (m.config().layer_kinds[layer] != LayerKind::kFullAttention) continue;
    run.contiguous_pages = device_cache->contiguous_pages(layer);
    run.pages = static_cast<int>(device_cache->blocks(layer).size());
  }
  return run;
}

std::vector<int32_t> TestPrompt() {
  std::vector<int32_t> p(1000);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>(3 + (i * 37 + 11) % 250);
  return p;
}

TEST(CudaPrefixInPlaceTest, ChunksReadingTheirPrefixInPlaceEqualCopyingItBitForBit) {
  UP_CUDA_TEST_CONTEXT(ctx);
  if (!ops::cuda::CudnnAttention::Create(ctx).ok()) GTEST_SKIP() << "no cuDNN on this machine";
  const std::string path =
      testing::WriteTempFile("cuda_prefix_in_place_gemma3.gguf", testing::BuildTinyGemma3());
  const std::vector<int32_t> prompt = TestPrompt();
  for (int split_min_keys : {2048, 64}) {
    LoadOptions lo;
    lo.last_layer_every_row = true;  // the chunks' prefix attention is in the last layer
    lo.gpu_attention = GpuAttention::kCudnn;
    lo.gpu_prefix_split_min_keys = split_min_keys;
    auto m = LoadModel(path, ctx, lo);
    ASSERT_TRUE(m.ok()) << m.status().message();
    const ChunkedRun copied = RunChunked(**m, ctx, prompt, 97, /*in_place=*/false);
    const ChunkedRun read = RunChunked(**m, ctx, prompt, 97, /*in_place=*/true);
    std::printf("split-KV from %d keys: in place %d attentions (copying run %d), split %d / %d, "
                "full layer %d of %d pages contiguous (copying run %d)\n",
                split_min_keys, read.in_place, copied.in_place, read.split, copied.split,
                read.contiguous_pages, read.pages, copied.contiguous_pages);
    EXPECT_EQ(copied.in_place, 0);
    EXPECT_EQ(read.in_place, 10);  // chunks 2..11 of the one full-attention layer
    EXPECT_EQ(read.split, copied.split);
    EXPECT_EQ(read.head_rows, 1) << "chunks before the last want no logits: no head";
    if (split_min_keys == 64) {
      EXPECT_GT(read.split, 0) << "split-KV should have run";
    }
    EXPECT_EQ(read.contiguous_pages, read.pages);
    ASSERT_EQ(read.logits.size(), copied.logits.size());
    for (size_t i = 0; i < read.logits.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(read.logits[i].data(), copied.logits[i].data(),
                               read.logits[i].size() * 4))
          << "logits " << i << " (0: the prefill's)";
    }
  }
}

// Without cuDNN (`--gpu-attention ours`) chunks over their cached prefix run our Hopper kernel,
// in place or on the copied rows (the cache kernel, which they ran before, took 18x as long on
// the H200): both equal bit for bit, and they agree with the cache kernel's run (flash attention
// alone) within the bound of two bf16 attention kernels; with split-KV from 64 keys the kernel
// splits the keys of chunks whose few CTAs fill the SMs poorly (the tiny model's 2 heads always
// do) and merges the pieces, within the same bound.
TEST(CudaPrefixInPlaceTest, ChunksWithoutCudnnRunTheHopperKernelOverTheirPrefix) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const cudaDeviceProp& props = ctx.cuda().properties();
  if (!ops::cuda::WgmmaAttentionAvailable(props.major, props.minor)) {
    GTEST_SKIP() << "the Hopper kernel needs compute capability 9.0";
  }
  const std::string path =
      testing::WriteTempFile("cuda_prefix_wgmma_gemma3.gguf", testing::BuildTinyGemma3());
  const std::vector<int32_t> prompt = TestPrompt();
  LoadOptions flash_options;
  flash_options.last_layer_every_row = true;
  flash_options.gpu_attention = GpuAttention::kFlash;
  auto flash = LoadModel(path, ctx, flash_options);
  ASSERT_TRUE(flash.ok()) << flash.status().message();
  const ChunkedRun cache_kernel = RunChunked(**flash, ctx, prompt, 97, /*in_place=*/true);
  EXPECT_EQ(cache_kernel.in_place, 0) << "flash attention alone: the cache kernel";
  for (int split_min_keys : {2048, 64}) {
    LoadOptions ours_options;
    ours_options.last_layer_every_row = true;
    ours_options.gpu_attention = GpuAttention::kOurs;
    ours_options.gpu_prefix_split_min_keys = split_min_keys;
    auto ours = LoadModel(path, ctx, ours_options);
    ASSERT_TRUE(ours.ok()) << ours.status().message();
    const ChunkedRun copied = RunChunked(**ours, ctx, prompt, 97, /*in_place=*/false);
    const ChunkedRun read = RunChunked(**ours, ctx, prompt, 97, /*in_place=*/true);
    std::printf("split-KV from %d keys: %d of the chunks' attentions split\n", split_min_keys,
                read.split);
    EXPECT_EQ(read.in_place, 10);  // chunks 2..11 of the one full-attention layer
    EXPECT_EQ(copied.in_place, 0);
    EXPECT_EQ(read.split, copied.split);
    if (split_min_keys == 64) {
      EXPECT_GT(read.split, 0) << "the Hopper kernel should have split the keys";
    } else {
      EXPECT_EQ(read.split, 0) << "no prefix of this prompt holds two splits of 2048 keys";
    }
    ASSERT_EQ(read.logits.size(), copied.logits.size());
    ASSERT_EQ(read.logits.size(), cache_kernel.logits.size());
    for (size_t i = 0; i < read.logits.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(read.logits[i].data(), copied.logits[i].data(),
                               read.logits[i].size() * 4))
          << "logits " << i << " (0: the prefill's)";
      const double err = testing::RelativeL2Error(read.logits[i], cache_kernel.logits[i]);
      std::printf("logits %zu: Hopper kernel vs cache kernel, relative L2 %.2e\n", i, err);
      EXPECT_LT(err, 2e-2) << "logits " << i << ", split-KV from " << split_min_keys << " keys";
    }
  }
}

// Prompts of different lengths chunked side by side (each forward holds a chunk of every
// unfinished prompt, chunk sizes odd and different), then decoded together: every request's
// logits, in request order.
struct TogetherRun {
  std::vector<std::vector<float>> logits;  // per request: the prefill's, then each decode's
  int in_place = 0, split = 0;
};

TogetherRun RunTogether(Model& m, DeviceContext& ctx, const std::vector<std::vector<int32_t>>& ps,
                        const std::vector<int>& chunks, bool in_place) {
  TogetherRun run;
  const size_t n = ps.size();
  std::vector<std::unique_ptr<SequenceCache>> caches;
  std::vector<std::vector<float>> logits(n, std::vector<float>(m.config().vocab_size));
  std::vector<size_t> at(n, 0);
  for (size_t r = 0; r < n; ++r) {
    caches.push_back(m.NewCache(static_cast<int>(ps[r].size()) + 8, {}));
    if (in_place) caches[r]->ExpectPrefill(static_cast<int>(ps[r].size()), true);
  }
  const UniPrefillConfig dense;
  ForwardStats stats;
  for (;;) {
    std::vector<SequenceStep> steps;
    std::vector<size_t> took(n, 0);
    for (size_t r = 0; r < n; ++r) {
      if (at[r] == ps[r].size()) continue;
      took[r] = std::min(ps[r].size() - at[r], static_cast<size_t>(chunks[r]));
      const bool last = at[r] + took[r] == ps[r].size();
      steps.push_back({caches[r].get(), std::span<const int32_t>(ps[r].data() + at[r], took[r]),
                       last ? logits[r].data() : nullptr, nullptr});
    }
    if (steps.empty()) break;
    EXPECT_TRUE(m.ForwardBatch(ctx, steps, dense, nullptr, &stats).ok());
    for (size_t r = 0; r < n; ++r) at[r] += took[r];
  }
  run.logits = logits;
  for (int step = 0; step < 2; ++step) {
    std::vector<int32_t> next(n);
    std::vector<SequenceStep> steps;
    for (size_t r = 0; r < n; ++r) {
      next[r] = static_cast<int32_t>(std::max_element(logits[r].begin(), logits[r].end()) -
                                     logits[r].begin());
      steps.push_back({caches[r].get(), std::span<const int32_t>(&next[r], 1), logits[r].data(),
                       nullptr});
    }
    EXPECT_TRUE(m.ForwardBatch(ctx, steps, dense).ok());
    for (size_t r = 0; r < n; ++r) {
      run.logits.push_back(logits[r]);
    }
  }
  run.in_place = stats.prefix_reads_in_place;
  run.split = stats.split_prefix_attentions;
  return run;
}

// UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH=1: the chunks of several prompts in one step share one launch
// of our Hopper kernel (CudaBackend::WgmmaPrefixBatch) over the pool's planes (in place) or the
// gathered rows. Without key splits each (query tile, head) CTA computes exactly what its own
// launch computed: equal bit for bit to a launch per request; with splits from 64 keys the split
// count is chosen for all the chunks together, so the logits stay within the bound of two bf16
// attention kernels of the per-request run. Three prompts (1000, 700, 333 tokens) in chunks of
// 97, 61 and 128 rows.
TEST(CudaPrefixInPlaceTest, ChunksOfSeveralPromptsShareOneLaunchWhenAsked) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const cudaDeviceProp& props = ctx.cuda().properties();
  if (!ops::cuda::WgmmaAttentionAvailable(props.major, props.minor)) {
    GTEST_SKIP() << "the Hopper kernel needs compute capability 9.0";
  }
  const std::string path =
      testing::WriteTempFile("cuda_prefix_one_launch_gemma3.gguf", testing::BuildTinyGemma3());
  const std::vector<int32_t> whole = TestPrompt();
  const std::vector<std::vector<int32_t>> prompts = {
      whole, std::vector<int32_t>(whole.begin() + 100, whole.begin() + 800),
      std::vector<int32_t>(whole.begin() + 7, whole.begin() + 340)};
  const std::vector<int> chunks = {97, 61, 128};
  for (int split_min_keys : {2048, 64}) {
    LoadOptions lo;
    lo.last_layer_every_row = true;  // the chunks' prefix attention is in the last layer
    lo.gpu_attention = GpuAttention::kOurs;
    lo.gpu_prefix_split_min_keys = split_min_keys;
    auto apart = LoadModel(path, ctx, lo);
    ASSERT_TRUE(apart.ok()) << apart.status().message();
    ASSERT_EQ(setenv("UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH", "1", 1), 0);
    auto together = LoadModel(path, ctx, lo);  // the backend reads the variable when made
    unsetenv("UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH");
    ASSERT_TRUE(together.ok()) << together.status().message();
    for (bool in_place : {true, false}) {
      const TogetherRun a = RunTogether(**apart, ctx, prompts, chunks, in_place);
      const TogetherRun b = RunTogether(**together, ctx, prompts, chunks, in_place);
      std::printf("split from %d keys, %s: in place %d / %d, split %d / %d (apart / together)\n",
                  split_min_keys, in_place ? "in place" : "copied", a.in_place, b.in_place,
                  a.split, b.split);
      EXPECT_EQ(a.in_place, b.in_place);
      // Chunks after each prompt's first, of the 1000- and 700-token prompts: the 333-token one
      // (21 pages of 16 tokens) takes no run of blocks (kMinRunPages), and its single blocks
      // interleave with the sliding layers', so its chunks are copied (H200, 23rd session).
      EXPECT_EQ(a.in_place, in_place ? 10 + 11 : 0);
      ASSERT_EQ(a.logits.size(), b.logits.size());
      for (size_t i = 0; i < a.logits.size(); ++i) {
        if (split_min_keys == 2048) {
          EXPECT_EQ(0, std::memcmp(a.logits[i].data(), b.logits[i].data(), a.logits[i].size() * 4))
              << "logits " << i << (in_place ? " in place" : " copied");
        } else {
          const double err = testing::RelativeL2Error(b.logits[i], a.logits[i]);
          EXPECT_LT(err, 2e-2) << "logits " << i << (in_place ? " in place" : " copied");
        }
      }
      if (split_min_keys == 64) {
        EXPECT_GT(b.split, 0) << "the batched launch should have split";
      }
    }
  }
}

// UNIPREFILL_CUDA_WGMMA_GROUP_ORDER=1, UNIPREFILL_CUDA_WGMMA_SKIP_UNIT_RESCALE=1 and
// UNIPREFILL_CUDA_WGMMA_SCHEDULE change when the Hopper kernel's CTAs and instructions run and
// skip multiplies by exactly 1: the prefill's and every chunk's logits (whole prefills and chunks
// over their prefix, split or not) equal the default launch's (all three on) bit for bit.
TEST(CudaPrefixInPlaceTest, TheHopperKernelsLaunchChoicesChangeNoBit) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const cudaDeviceProp& props = ctx.cuda().properties();
  if (!ops::cuda::WgmmaAttentionAvailable(props.major, props.minor)) {
    GTEST_SKIP() << "the Hopper kernel needs compute capability 9.0";
  }
  const std::string path =
      testing::WriteTempFile("cuda_wgmma_choices_gemma3.gguf", testing::BuildTinyGemma3());
  const std::vector<int32_t> prompt = TestPrompt();
  struct Choice {
    const char* order;
    const char* skip;
    const char* schedule;
  };
  const Choice choices[] = {{"1", "0", "overlap"},
                            {"0", "1", "overlap"},
                            {"0", "0", "pv_beside_exp"},
                            {"0", "0", "serial"},
                            {"0", "0", "overlap"}};  // the defaults until the 32nd session
  const char* kOrder = "UNIPREFILL_CUDA_WGMMA_GROUP_ORDER";
  const char* kSkip = "UNIPREFILL_CUDA_WGMMA_SKIP_UNIT_RESCALE";
  const char* kSchedule = "UNIPREFILL_CUDA_WGMMA_SCHEDULE";
  for (int split_min_keys : {2048, 64}) {
    LoadOptions lo;
    lo.last_layer_every_row = true;  // the chunks' prefix attention is in the last layer
    lo.gpu_attention = GpuAttention::kOurs;
    lo.gpu_prefix_split_min_keys = split_min_keys;
    auto base = LoadModel(path, ctx, lo);
    ASSERT_TRUE(base.ok()) << base.status().message();
    const ChunkedRun want = RunChunked(**base, ctx, prompt, 97, /*in_place=*/true);
    EXPECT_EQ(want.in_place, 10) << "the chunks should run the Hopper kernel over their prefix";
    for (const Choice& c : choices) {
      ASSERT_EQ(setenv(kOrder, c.order, 1), 0);
      ASSERT_EQ(setenv(kSkip, c.skip, 1), 0);
      ASSERT_EQ(setenv(kSchedule, c.schedule, 1), 0);
      auto other = LoadModel(path, ctx, lo);  // the backend reads the variables when made
      unsetenv(kOrder);
      unsetenv(kSkip);
      unsetenv(kSchedule);
      ASSERT_TRUE(other.ok()) << other.status().message();
      const ChunkedRun got = RunChunked(**other, ctx, prompt, 97, /*in_place=*/true);
      EXPECT_EQ(got.split, want.split);
      ASSERT_EQ(got.logits.size(), want.logits.size());
      for (size_t i = 0; i < got.logits.size(); ++i) {
        EXPECT_EQ(0, std::memcmp(got.logits[i].data(), want.logits[i].data(),
                                 got.logits[i].size() * 4))
            << "logits " << i << ", group order " << c.order << ", skip " << c.skip
            << ", schedule " << c.schedule << ", split from " << split_min_keys << " keys";
      }
    }
  }
}

// A value the variables do not know is refused when the model loads, naming the variable.
TEST(CudaPrefixInPlaceTest, ABadLaunchChoiceValueFailsTheLoadNamingIt) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const std::string path =
      testing::WriteTempFile("cuda_wgmma_bad_choice_gemma3.gguf", testing::BuildTinyGemma3());
  for (const char* name : {"UNIPREFILL_CUDA_WGMMA_GROUP_ORDER",
                           "UNIPREFILL_CUDA_WGMMA_SKIP_UNIT_RESCALE",
                           "UNIPREFILL_CUDA_WGMMA_SCHEDULE"}) {
    ASSERT_EQ(setenv(name, "yes", 1), 0);
    auto m = LoadModel(path, ctx, LoadOptions{});
    unsetenv(name);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find(name), std::string::npos) << m.status().message();
  }
}

}  // namespace
}  // namespace uniprefill
