// RmsNorm, Rope, RopeInvFreq, GatedActivation, Embedding and Add vs the scalar references, over
// odd sizes, strided rows and 1 / 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace uniprefill::ops {
namespace {

using testing::MaxErrorOverRms;
using testing::RandomFloats;
using testing::RandomWeights;

// A [rows, cols] f32 view of v with row stride `stride`.
TensorView View(std::vector<float>& v, int64_t rows, int64_t cols, int64_t stride) {
  TensorView t = TensorView::Contiguous(v.data(), DType::kF32, {rows, cols});
  t.stride[0] = stride;
  return t;
}

class ElementwiseTest : public ::testing::TestWithParam<int> {
 protected:
  std::unique_ptr<DeviceContext> ctx_ = DeviceContext::Cpu(GetParam());
  std::mt19937 rng_{42};
};

TEST_P(ElementwiseTest, RmsNormMatchesReferenceInPlaceAndStrided) {
  for (int64_t rows : {1, 3, 65}) {
    for (int64_t d : {1, 7, 16, 33, 640}) {
      const int64_t stride = d + 2;
      std::vector<float> x = RandomFloats(rng_, rows * stride, -3, 3), ref = x;
      const std::vector<float> w = RandomFloats(rng_, d, 0.5f, 1.5f);
      reference::RmsNorm(View(ref, rows, d, stride), View(ref, rows, d, stride), w.data(), 1e-6f);
      RmsNorm(*ctx_, View(x, rows, d, stride), View(x, rows, d, stride), w.data(), 1e-6f);
      EXPECT_LT(MaxErrorOverRms(x, ref), 2e-6) << rows << "x" << d;
    }
  }
}

TEST_P(ElementwiseTest, AddMatchesReference) {
  for (int64_t rows : {1, 2, 130}) {
    for (int64_t d : {1, 9, 640}) {
      std::vector<float> a = RandomFloats(rng_, rows * (d + 1)), b = RandomFloats(rng_, rows * d);
      std::vector<float> ref = a;
      reference::Add(View(ref, rows, d, d + 1), View(ref, rows, d, d + 1), View(b, rows, d, d));
      Add(*ctx_, View(a, rows, d, d + 1), View(a, rows, d, d + 1), View(b, rows, d, d));
      EXPECT_EQ(a, ref);
    }
  }
}

TEST_P(ElementwiseTest, RopeMatchesReferenceForBothStylesAndPartialRotation) {
  for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kAdjacent}) {
    for (int64_t t : {1, 3, 70}) {
      for (auto [h, d, rot] : {std::tuple{4, 256, 256}, {1, 64, 32}, {3, 10, 6}, {2, 9, 8}}) {
        std::vector<float> x = RandomFloats(rng_, t * h * d), ref = x;
        std::vector<int32_t> pos(t);
        for (int64_t i = 0; i < t; ++i) pos[i] = static_cast<int32_t>(1000 * i + 17);
        const std::vector<float> inv = RopeInvFreq(10000.0, rot);
        auto view = [&](std::vector<float>& v) {
          return TensorView::Contiguous(v.data(), DType::kF32, {t, h, d});
        };
        reference::Rope(view(ref), pos.data(), inv.data(), rot, style);
        Rope(*ctx_, view(x), pos.data(), inv.data(), rot, style);
        EXPECT_LT(MaxErrorOverRms(x, ref), 2e-6) << t << " " << h << " " << d << " " << rot;
      }
    }
  }
}

TEST(RopeInvFreqTest, FollowsThetaPowerLaw) {
  const std::vector<float> inv = RopeInvFreq(1e6, 256);
  ASSERT_EQ(inv.size(), 128u);
  EXPECT_EQ(inv[0], 1.0f);
  for (int i = 0; i < 128; ++i) EXPECT_NEAR(inv[i], std::pow(1e6, -2.0 * i / 256), 1e-6 * inv[i]);
}

TEST_P(ElementwiseTest, GatedActivationIsAccurateToAboutOneUlp) {
  for (Activation act : {Activation::kGeluTanh, Activation::kSilu}) {
    for (int64_t t : {1, 3, 17}) {
      for (int64_t f : {1, 7, 8, 2048}) {
        // gate and up are the two halves of one fused [t, 2f] row; out aliases gate.
        std::vector<float> gu = RandomFloats(rng_, t * 2 * f, -6, 6), ref(t * f);
        TensorView gate = View(gu, t, f, 2 * f);
        TensorView up = gate;
        up.data = gu.data() + f;
        reference::GatedActivation(View(ref, t, f, f), gate, up, act);
        GatedActivation(*ctx_, gate, gate, up, act);
        for (int64_t r = 0; r < t; ++r) {
          for (int64_t i = 0; i < f; ++i) {
            const float want = ref[r * f + i], got = gu[r * 2 * f + i];
            ASSERT_NEAR(got, want, 1e-6 * std::max(1.0f, std::fabs(want))) << "i " << i;
          }
        }
      }
    }
  }
}

TEST_P(ElementwiseTest, EmbeddingDequantisesAndScalesRows) {
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_K,
                     DType::kQ6_K, DType::kQ5_0}) {
    const int64_t vocab = 50, d = 256;
    std::vector<uint8_t> table = RandomWeights(rng_, type, vocab, d);
    const TensorView tv = TensorView::Contiguous(table.data(), type, {vocab, d});
    const std::vector<int32_t> ids = {0, 49, 3, 3, 17, 8, 1, 2, 44, 5, 6, 7, 9, 10, 11, 12, 13,
                                      14, 15, 16, 18};
    const int64_t t = static_cast<int64_t>(ids.size());
    std::vector<float> out(t * (d + 4)), ref(t * (d + 4));
    Embedding(*ctx_, View(out, t, d, d + 4), tv, ids.data(), 25.3f);
    reference::Embedding(View(ref, t, d, d + 4), tv, ids.data(), 25.3f);
    EXPECT_EQ(out, ref) << DTypeName(type);
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, ElementwiseTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace uniprefill::ops
