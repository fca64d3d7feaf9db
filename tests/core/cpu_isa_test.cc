// CPU ISA levels (core/cpu_isa.h): names, the choice of auto, and the error for a level the CPU
// lacks. Features are given explicitly, so every case runs on any CPU.
#include "core/cpu_isa.h"

#include <gtest/gtest.h>

#include "core/device_context.h"
#include "uniprefill/engine.h"

namespace uniprefill {
namespace {

CpuFeatures Avx2Only() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = true;
  return f;
}

CpuFeatures Avx512NoVnni() {
  CpuFeatures f = Avx2Only();
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;
  return f;
}

CpuFeatures Everything() {
  CpuFeatures f = Avx512NoVnni();
  f.avx512vnni = f.avx512bf16 = true;
  f.amx_tile = f.amx_bf16 = f.amx_int8 = true;
  return f;
}

TEST(CpuIsa, NamesRoundTrip) {
  for (CpuIsa isa :
       {CpuIsa::kAuto, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni, CpuIsa::kAvx512Bf16,
        CpuIsa::kAmxBf16}) {
    Result<CpuIsa> parsed = ParseCpuIsa(CpuIsaName(isa));
    ASSERT_TRUE(parsed.ok()) << CpuIsaName(isa);
    EXPECT_EQ(*parsed, isa);
  }
  EXPECT_EQ(CpuIsaName(CpuIsa::kAvx512Vnni), "avx512-vnni");
}

TEST(CpuIsa, UnknownNameIsAnErrorListingTheLevels) {
  Result<CpuIsa> parsed = ParseCpuIsa("avx512vnni");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("'avx512vnni'"), std::string::npos);
  EXPECT_NE(parsed.status().message().find("auto, avx2, avx512, avx512-vnni, avx512-bf16 or amx-bf16"),
            std::string::npos)
      << parsed.status().message();
}

TEST(CpuIsa, AutoPicksTheHighestLevelWhoseFeaturesAreAllPresent) {
  EXPECT_EQ(BestCpuIsa(Avx2Only()), CpuIsa::kAvx2);
  EXPECT_EQ(BestCpuIsa(Avx512NoVnni()), CpuIsa::kAvx512);
  EXPECT_EQ(BestCpuIsa(Everything()), CpuIsa::kAmxBf16);
  // AMX without the OS's permission (or tile state) reads as no AMX: the BF16 level.
  CpuFeatures no_amx = Everything();
  no_amx.amx_tile = no_amx.amx_bf16 = no_amx.amx_int8 = false;
  EXPECT_EQ(BestCpuIsa(no_amx), CpuIsa::kAvx512Bf16);
  // BF16 without VNNI: the levels are cumulative, so the BF16 level is not reachable.
  CpuFeatures bf16_no_vnni = Avx512NoVnni();
  bf16_no_vnni.avx512bf16 = true;
  EXPECT_EQ(BestCpuIsa(bf16_no_vnni), CpuIsa::kAvx512);
  // AVX-512 F without BW (Xeon Phi): not the AVX-512 level.
  CpuFeatures no_bw = Avx512NoVnni();
  no_bw.avx512bw = false;
  EXPECT_EQ(BestCpuIsa(no_bw), CpuIsa::kAvx2);
  Result<CpuIsa> resolved = ResolveCpuIsa(CpuIsa::kAuto, Avx512NoVnni());
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(*resolved, CpuIsa::kAvx512);
}

TEST(CpuIsa, ForcingALevelTheCpuHasResolvesToIt) {
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni, CpuIsa::kAvx512Bf16,
                     CpuIsa::kAmxBf16}) {
    Result<CpuIsa> resolved = ResolveCpuIsa(isa, Everything());
    ASSERT_TRUE(resolved.ok()) << CpuIsaName(isa);
    EXPECT_EQ(*resolved, isa);
  }
}

TEST(CpuIsa, ForcingALevelTheCpuLacksNamesTheMissingFeaturesAndTheLevelsItHas) {
  Result<CpuIsa> r = ResolveCpuIsa(CpuIsa::kAvx512, Avx2Only());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "CPU ISA level 'avx512' (--cpu-isa / UNIPREFILL_CPU_ISA) needs avx512f avx512bw "
            "avx512vl avx512dq, which this CPU lacks; it supports avx2 (or use auto to pick the "
            "best)");
  r = ResolveCpuIsa(CpuIsa::kAvx512Bf16, Avx512NoVnni());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("needs avx512vnni avx512bf16, which"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("it supports avx2, avx512 ("), std::string::npos)
      << r.status().message();
}

TEST(CpuIsa, MissingFeaturesOfASupportedLevelIsEmpty) {
  EXPECT_EQ(MissingCpuFeatures(CpuIsa::kAvx2, Avx2Only()), "");
  EXPECT_EQ(MissingCpuFeatures(CpuIsa::kAvx512Vnni, Avx512NoVnni()), "avx512vnni");
  EXPECT_EQ(MissingCpuFeatures(CpuIsa::kAmxBf16, Avx512NoVnni()),
            "avx512vnni avx512bf16 amx_tile amx_bf16 amx_int8");
  EXPECT_EQ(DescribeCpuFeatures(Avx2Only()), "avx2 fma f16c");
}

TEST(CpuIsa, EngineRejectsAnUnknownLevelBeforeLoadingAnything) {
  EngineOptions eo;
  eo.model_path = "/nonexistent/model.gguf";
  eo.cpu_isa = "sse2";
  auto engine = Engine::Load(eo);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("unknown CPU ISA level 'sse2'"), std::string::npos)
      << engine.status().message();
}

TEST(CpuIsa, ACpuContextRunsAtTheLevelItWasGiven) {
  const CpuIsa best = BestCpuIsa(DetectCpuFeatures());
  EXPECT_EQ(DeviceContext::Cpu(1)->cpu_isa(), best);
  EXPECT_EQ(DeviceContext::Cpu(1, CpuIsa::kAvx2)->cpu_isa(), CpuIsa::kAvx2);
  EXPECT_EQ(DeviceContext::Cpu(1, best)->cpu_isa(), best);
}

}  // namespace
}  // namespace uniprefill
