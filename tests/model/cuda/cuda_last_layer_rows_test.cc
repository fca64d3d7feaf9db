// The last layer's queries on the GPU (QueryRows::kLastOfEach, cuda_backend_last_rows.cc): each
// request's last row is attended for from the cache as a decode (the paged decode kernel at head
// dims 64 / 128 / 256, the cache kernel at others), every other row only caches its key and value.
// Against the same model with the last layer over every row (LoadOptions::last_layer_every_row;
// fresh prompts there run the prefill kernels): every logits vector of the mixed scenario
// (testing/last_layer_scenario.h: fresh prompts, a decode, chunks over a cached prefix, decodes
// after) within a bound of rounding (the decode-only forwards after bit for bit: the caches are
// the same), on the tiny checkpoints of the three families, the tiny and
// tiny-hybrid presets, and the tiny Gemma 3 preset with a sliding-window last layer whose window's
// first key opens a cache page (the one entry a fresh sliding prefill stores for its last row).
// ForwardStats::last_layer_rows: one row per request.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/model_presets.h"
#include "model/transformer_model.h"
#include "testing/compare.h"
#include "testing/cuda_model_fixtures.h"
#include "testing/cuda_test_util.h"
#include "testing/last_layer_scenario.h"

namespace uniprefill {
namespace {

// Max |last - every| / max |every| over every logits vector. Both runs are bf16 throughout; they
// differ in the last layer's attention kernel for the last rows only (a decode kernel against a
// prefill kernel: different orders of the same sums, P rounded to bf16 in one of them).
constexpr double kBound = 2e-2;

UniPrefillConfig Dense() {
  UniPrefillConfig c;
  c.enabled = false;
  return c;
}

void Compare(const std::string& label, Model& last, Model& every, DeviceContext& ctx,
             const testing::LastLayerScenario& z) {
  SCOPED_TRACE(label);
  const testing::LastLayerTrace tl = testing::RunLastLayerScenario(last, ctx, Dense(), z);
  const testing::LastLayerTrace te = testing::RunLastLayerScenario(every, ctx, Dense(), z);
  ASSERT_EQ(tl.logits.size(), te.logits.size());
  double worst = 0;
  for (size_t i = 0; i < tl.logits.size(); ++i) {
    const double e = testing::MaxErrorOverMaxAbs(tl.logits[i], te.logits[i]);
    if (i < testing::LastLayerTrace::kFirstDecodeOnly) {
      worst = std::max(worst, e);
      EXPECT_LE(e, kBound) << "logits " << i;
    } else {  // the same caches, the same one-row steps
      EXPECT_EQ(tl.logits[i], te.logits[i]) << "decode logits " << i << " differ by " << e;
    }
  }
  std::printf("[%s] last rows only against every row: worst %.2e of the logits' scale\n",
              label.c_str(), worst);
  EXPECT_EQ(tl.last_layer_rows, z.LastRows());
  EXPECT_EQ(te.last_layer_rows, z.EveryRow());
}

std::unique_ptr<Model> Load(DeviceContext& ctx, const std::string& family, bool every_row) {
  LoadOptions lo;
  lo.last_layer_every_row = every_row;
  lo.gpu_cudnn_autotune = false;
  auto m = LoadModel(cuda_model_test::TinyDir(family), ctx, lo);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::unique_ptr<Model> Preset(DeviceContext& ctx, const std::string& name, int layers,
                              bool every_row, int window = 0) {
  RandomModelOptions o;
  o.seed = 5;
  o.n_layers = layers;
  o.sliding_window = window;
  Result<ModelDefinition> d = RandomModelDefinition(name, o);
  EXPECT_TRUE(d.ok()) << d.status().message();
  if (!d.ok()) return nullptr;
  LoadOptions lo;
  lo.last_layer_every_row = every_row;
  lo.gpu_cudnn_autotune = false;
  Result<std::unique_ptr<Model>> m = MakeModel(std::move(d).value(), ctx, lo);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m).value() : nullptr;
}

TEST(CudaLastLayerRowsTest, TinyCheckpointsOfEveryFamily) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (const char* family : {"llama", "qwen3_next", "gemma3"}) {
    auto last = Load(ctx, family, false), every = Load(ctx, family, true);
    ASSERT_TRUE(last && every);
    Compare(family, *last, *every, ctx, {});
  }
}

TEST(CudaLastLayerRowsTest, PresetsWithTheDecodeKernelsHeadDims) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (const char* name : {"tiny", "tiny-hybrid"}) {
    auto last = Preset(ctx, name, 0, false), every = Preset(ctx, name, 0, true);
    ASSERT_TRUE(last && every);
    Compare(name, *last, *every, ctx, {});
  }
}

TEST(CudaLastLayerRowsTest, ASlidingLastLayerReadsItsWholeWindowFromTheCache) {
  UP_CUDA_TEST_CONTEXT(ctx);
  // 5 layers: the last is sliding (window 48); 6: full. Fresh prompts whose last row's window
  // starts on a page boundary (47 + 16 k rows; 16-entry pages) and one that does not.
  for (int layers : {5, 6}) {
    auto last = Preset(ctx, "tiny-gemma3", layers, false),
         every = Preset(ctx, "tiny-gemma3", layers, true);
    ASSERT_TRUE(last && every);
    for (int fresh : {47 + 16 * 16, 47 + 16 * 40, 300}) {
      testing::LastLayerScenario z;
      z.fresh = fresh;
      Compare("tiny-gemma3, " + std::to_string(layers) + " layers, fresh " + std::to_string(fresh),
              *last, *every, ctx, z);
    }
  }
}

// The one entry a fresh sliding prefill stores for its last row alone (the oldest key of that
// row's window; later queries never see it), where leaving it out would cost a whole page: a
// window of 5 and 16-entry pages, fresh prompts of 16 k + 4 rows, whose last row's window starts
// on the last entry of a page the every-row walk never stores. Missing, one of the five keys is
// gone from that row's attention: far outside the rounding between the kernels (the bound).
TEST(CudaLastLayerRowsTest, AFreshSlidingPrefillStoresItsLastRowsWholeWindow) {
  UP_CUDA_TEST_CONTEXT(ctx);
  auto last = Preset(ctx, "tiny-gemma3", 5, false, 5),
       every = Preset(ctx, "tiny-gemma3", 5, true, 5);
  ASSERT_TRUE(last && every);
  for (int fresh : {16 * 18 + 4, 16 * 30 + 4}) {
    testing::LastLayerScenario z;
    z.fresh = fresh;
    Compare("tiny-gemma3, window 5, fresh " + std::to_string(fresh), *last, *every, ctx, z);
  }
}

}  // namespace
}  // namespace uniprefill
