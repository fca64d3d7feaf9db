// GGUF reader: valid files of every shape (value types, nested arrays, alignment, tensor views),
// malformed files that must each fail with a clear error and never crash, and the real model.
#include "io/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "gguf_builder.h"
#include "io/dequant.h"
#include "testing/required_asset.h"

namespace uniprefill::gguf {
namespace {

using testing::GgufBuilder;
using testing::Val;
namespace t = testing;

Result<std::unique_ptr<GgufFile>> Parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::FromMemory(bytes.data(), bytes.size());
}

// Parses `bytes`, expects failure with `code` and a message containing `needle`.
void ExpectError(const std::vector<uint8_t>& bytes, ErrorCode code, const std::string& needle) {
  auto f = Parse(bytes);
  ASSERT_FALSE(f.ok()) << "expected an error containing: " << needle;
  EXPECT_EQ(f.status().code(), code) << f.status().message();
  EXPECT_NE(f.status().message().find(needle), std::string::npos)
      << "message: " << f.status().message() << "\nexpected to contain: " << needle;
}

std::vector<uint8_t> Bytes(size_t n, uint8_t fill = 0) { return std::vector<uint8_t>(n, fill); }

GgufBuilder EveryValueType() {
  GgufBuilder b;
  b.Kv("u8", Val::U8(200)).Kv("i8", Val::I8(-100)).Kv("u16", Val::U16(60000))
      .Kv("i16", Val::I16(-30000)).Kv("u32", Val::U32(4000000000u)).Kv("i32", Val::I32(-2000000000))
      .Kv("f32", Val::F32(1.5f)).Kv("bool", Val::Bool(true)).Kv("string", Val::Str("héllo"))
      .Kv("u64", Val::U64(1ull << 63)).Kv("i64", Val::I64(-(1ll << 62))).Kv("f64", Val::F64(-0.125))
      .Kv("arr.str", Val::Arr(t::kTString, {Val::Str("a"), Val::Str(""), Val::Str("ccc")}))
      .Kv("arr.f32", Val::Arr(t::kTF32, {Val::F32(0.5f), Val::F32(-2.0f)}))
      .Kv("arr.i32", Val::Arr(t::kTI32, {Val::I32(-1), Val::I32(3)}))
      .Kv("arr.u8", Val::Arr(t::kTU8, {Val::U8(1), Val::U8(255)}))
      .Kv("arr.empty", Val::Arr(t::kTU64, {}))
      .Kv("arr.nested", Val::Arr(t::kTArray, {Val::Arr(t::kTI16, {Val::I16(-5)}),
                                              Val::Arr(t::kTString, {Val::Str("x"), Val::Str("y")}),
                                              Val::Arr(t::kTArray, {Val::Arr(t::kTBool, {Val::Bool(false)})})}));
  return b;
}

// ---- Valid files ----------------------------------------------------------------------------

TEST(Gguf, ReadsEveryScalarValueTypeWidened) {
  auto f = Parse(EveryValueType().Build());
  ASSERT_TRUE(f.ok()) << f.status().message();
  const GgufFile& g = *f.value();
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.metadata().size(), 18u);
  EXPECT_EQ(g.metadata()[0].first, "u8");  // file order
  EXPECT_EQ(g.Find("u8")->type, ValueType::kU8);
  EXPECT_EQ(std::get<uint64_t>(g.Find("u8")->data), 200u);
  EXPECT_EQ(std::get<int64_t>(g.Find("i8")->data), -100);
  EXPECT_EQ(std::get<uint64_t>(g.Find("u16")->data), 60000u);
  EXPECT_EQ(std::get<int64_t>(g.Find("i16")->data), -30000);
  EXPECT_EQ(std::get<uint64_t>(g.Find("u32")->data), 4000000000u);
  EXPECT_EQ(std::get<int64_t>(g.Find("i32")->data), -2000000000);
  EXPECT_EQ(std::get<double>(g.Find("f32")->data), 1.5);
  EXPECT_EQ(std::get<bool>(g.Find("bool")->data), true);
  EXPECT_EQ(std::get<std::string>(g.Find("string")->data), "héllo");
  EXPECT_EQ(std::get<uint64_t>(g.Find("u64")->data), 1ull << 63);
  EXPECT_EQ(std::get<int64_t>(g.Find("i64")->data), -(1ll << 62));
  EXPECT_EQ(std::get<double>(g.Find("f64")->data), -0.125);
  EXPECT_EQ(g.Find("f64")->type, ValueType::kF64);
  EXPECT_EQ(g.Find("missing"), nullptr);
}

TEST(Gguf, ReadsArraysIncludingNestedAndEmpty) {
  auto f = Parse(EveryValueType().Build());
  ASSERT_TRUE(f.ok()) << f.status().message();
  const GgufFile& g = *f.value();
  EXPECT_EQ(g.GetStringArray("arr.str").value(), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(g.GetFloatArray("arr.f32").value(), (std::vector<float>{0.5f, -2.0f}));
  EXPECT_EQ(g.GetIntArray("arr.i32").value(), (std::vector<int64_t>{-1, 3}));
  EXPECT_EQ(g.GetIntArray("arr.u8").value(), (std::vector<int64_t>{1, 255}));
  EXPECT_TRUE(g.GetIntArray("arr.empty")->empty());
  const Array& nested = std::get<Array>(g.Find("arr.nested")->data);
  ASSERT_EQ(nested.element_type, ValueType::kArray);
  ASSERT_EQ(nested.elements.size(), 3u);
  const Array& a0 = std::get<Array>(nested.elements[0].data);
  EXPECT_EQ(a0.element_type, ValueType::kI16);
  EXPECT_EQ(std::get<int64_t>(a0.elements[0].data), -5);
  const Array& a1 = std::get<Array>(nested.elements[1].data);
  EXPECT_EQ(std::get<std::string>(a1.elements[1].data), "y");
  const Array& a2 = std::get<Array>(std::get<Array>(nested.elements[2].data).elements[0].data);
  EXPECT_EQ(a2.element_type, ValueType::kBool);
  EXPECT_EQ(std::get<bool>(a2.elements[0].data), false);
}

TEST(Gguf, ReleasedArraysAreEmptyAndTheirGettersSayTheyCameTooLate) {
  auto f = Parse(EveryValueType().Build());
  ASSERT_TRUE(f.ok()) << f.status().message();
  GgufFile& g = *f.value();
  g.ReleaseArrays();
  EXPECT_TRUE(std::get<Array>(g.Find("arr.str")->data).elements.empty());
  EXPECT_EQ(std::get<Array>(g.Find("arr.nested")->data).element_type, ValueType::kArray);
  const auto strings = g.GetStringArray("arr.str");
  ASSERT_FALSE(strings.ok());
  EXPECT_NE(strings.status().message().find("released"), std::string::npos);
  EXPECT_FALSE(g.GetFloatArray("arr.f32").ok());
  EXPECT_FALSE(g.GetIntArray("arr.i32").ok());
  EXPECT_EQ(g.GetString("string").value(), "héllo");  // scalars stay
}

TEST(Gguf, GettersConvertBetweenIntegerTypesWhenTheValueFits) {
  auto f = Parse(EveryValueType().Build());
  ASSERT_TRUE(f.ok());
  const GgufFile& g = *f.value();
  EXPECT_EQ(g.GetUInt("u8").value(), 200u);
  EXPECT_EQ(g.GetInt("u32").value(), 4000000000ll);
  EXPECT_EQ(g.GetInt("i8").value(), -100);
  EXPECT_EQ(g.GetUInt("u64").value(), 1ull << 63);
  EXPECT_EQ(g.GetInt("u64").status().code(), ErrorCode::kInvalidArgument);  // > INT64_MAX
  EXPECT_EQ(g.GetUInt("i8").status().code(), ErrorCode::kInvalidArgument);  // negative
  EXPECT_EQ(g.GetFloat("f32").value(), 1.5);
  EXPECT_EQ(g.GetFloat("f64").value(), -0.125);
  EXPECT_EQ(g.GetFloat("i16").value(), -30000.0);
  EXPECT_EQ(g.GetBool("bool").value(), true);
  EXPECT_EQ(g.GetString("string").value(), "héllo");
}

TEST(Gguf, GettersReportMissingKeysAndWrongTypes) {
  auto f = Parse(EveryValueType().Build());
  ASSERT_TRUE(f.ok());
  const GgufFile& g = *f.value();
  EXPECT_EQ(g.GetString("nope").status().code(), ErrorCode::kNotFound);
  EXPECT_NE(g.GetString("nope").status().message().find("'nope' not found"), std::string::npos);
  const Status s = g.GetString("u32").status();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'u32' is u32, expected string"), std::string::npos) << s.message();
  EXPECT_EQ(g.GetBool("u8").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(g.GetInt("string").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(g.GetFloat("bool").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(g.GetStringArray("arr.f32").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(g.GetFloatArray("arr.str").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(g.GetIntArray("arr.f32").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(g.GetIntArray("u8").status().code(), ErrorCode::kInvalidArgument);
}

TEST(Gguf, AcceptsVersion2) {
  auto f = Parse(GgufBuilder().Version(2).Kv("k", Val::U8(1)).Build());
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f.value()->version(), 2u);
}

std::vector<uint8_t> Iota(size_t n, uint8_t start = 0) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(start + i);
  return b;
}

TEST(Gguf, TensorDataFollowsAlignmentPadding) {
  for (uint32_t align : {1u, 8u, 32u, 64u, 256u}) {
    GgufBuilder b;
    b.Alignment(align).Kv("x", Val::Str("abc"));
    b.Tensor("a", {3}, 0, Iota(12, 1)).Tensor("b", {5}, 0, Iota(20, 100));
    const std::vector<uint8_t> bytes = b.Build();
    auto f = Parse(bytes);
    ASSERT_TRUE(f.ok()) << align << ": " << f.status().message();
    const GgufFile& g = *f.value();
    EXPECT_EQ(g.alignment(), align);
    const TensorInfo* tb = g.FindTensor("b");
    ASSERT_NE(tb, nullptr);
    EXPECT_EQ(tb->offset % align, 0u);
    EXPECT_EQ(tb->n_bytes, 20u);
    const size_t at = static_cast<size_t>(tb->data - reinterpret_cast<const uint8_t*>(
                                                        g.tensors()[0].data)) +
                      static_cast<size_t>(g.tensors()[0].offset);
    EXPECT_EQ(at, tb->offset);
    EXPECT_EQ(tb->data[0], 100);
    EXPECT_EQ(tb->data[19], 119);
    EXPECT_EQ(g.tensors()[0].data[0], 1);
  }
}

TEST(Gguf, DefaultAlignmentIs32) {
  auto f = Parse(GgufBuilder().Tensor("a", {1}, 0, Iota(4)).Build());
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f.value()->alignment(), 32u);
  EXPECT_EQ(f.value()->file_size() % 32, 4u);  // data section starts on a 32-byte boundary
}

TEST(Gguf, TensorViewReversesGgufDims) {
  GgufBuilder b;
  b.Tensor("w", {64, 3}, 8, Bytes(3 * 2 * 34));  // Q8_0 [in=64, out=3]: 2 blocks per row
  b.Tensor("norm", {7}, 0, Bytes(28));
  b.Tensor("cube", {4, 3, 2}, 1, Bytes(48));
  auto f = Parse(b.Build());
  ASSERT_TRUE(f.ok()) << f.status().message();
  const GgufFile& g = *f.value();
  const TensorInfo& w = *g.FindTensor("w");
  EXPECT_EQ(w.type, DType::kQ8_0);
  EXPECT_EQ(w.numel(), 192);
  EXPECT_EQ(w.n_bytes, 204u);
  const TensorView v = w.View();
  EXPECT_EQ(v.ndim, 2);
  EXPECT_EQ(v.shape[0], 3);
  EXPECT_EQ(v.shape[1], 64);
  EXPECT_EQ(v.stride[0], 64);
  EXPECT_EQ(v.stride[1], 1);
  EXPECT_EQ(v.dtype, DType::kQ8_0);
  EXPECT_EQ(v.data, static_cast<const void*>(w.data));
  const TensorView n = g.FindTensor("norm")->View();
  EXPECT_EQ(n.ndim, 1);
  EXPECT_EQ(n.shape[0], 7);
  const TensorView c = g.FindTensor("cube")->View();
  EXPECT_EQ(c.ndim, 3);
  EXPECT_EQ(c.shape[0], 2);
  EXPECT_EQ(c.shape[2], 4);
  EXPECT_EQ(c.stride[0], 12);
  EXPECT_EQ(c.ShapeString(), "F16 [2, 3, 4]");
  EXPECT_EQ(g.FindTensor("nope"), nullptr);
}

TEST(Gguf, OpenMapsAFileAndReportsMissingFiles) {
  const std::string path = std::string(UP_BINARY_DIR) + "/gguf_test_open.gguf";
  const std::vector<uint8_t> bytes = GgufBuilder().Kv("k", Val::Str("v"))
                                         .Tensor("t", {2}, 0, Iota(8)).Build();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f.value()->path(), path);
  EXPECT_EQ(f.value()->GetString("k").value(), "v");
  EXPECT_EQ(f.value()->FindTensor("t")->data[7], 7);
  std::remove(path.c_str());
  auto missing = GgufFile::Open(path);
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

// ---- Malformed files ------------------------------------------------------------------------

TEST(GgufMalformed, BadMagic) {
  ExpectError(GgufBuilder().Magic(0x58554747).Build(), ErrorCode::kDataLoss,
              "not a GGUF file (magic 'GGUX', expected 'GGUF')");
  ExpectError({'G', 'G'}, ErrorCode::kDataLoss, "not a GGUF file");
  ExpectError({}, ErrorCode::kDataLoss, "not a GGUF file");
}

TEST(GgufMalformed, UnsupportedVersion) {
  ExpectError(GgufBuilder().Version(1).Build(), ErrorCode::kUnimplemented, "unsupported version 1");
  ExpectError(GgufBuilder().Version(4).Build(), ErrorCode::kUnimplemented, "expected 2 or 3");
  ExpectError(GgufBuilder().Version(0x03000000).Build(), ErrorCode::kUnimplemented, "big-endian");
}

// Every proper prefix of a valid file (with metadata of every type and tensors) must fail cleanly.
TEST(GgufMalformed, EveryTruncationIsAnError) {
  GgufBuilder b = EveryValueType();
  b.Tensor("a", {32, 2}, 8, Iota(68)).Tensor("b", {3}, 0, Iota(12));
  const std::vector<uint8_t> full = b.Build();
  ASSERT_TRUE(Parse(full).ok());
  for (size_t n = 0; n < full.size(); ++n) {
    auto f = GgufFile::FromMemory(full.data(), n);
    ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
    ASSERT_EQ(f.status().code(), ErrorCode::kDataLoss) << f.status().message();
  }
}

TEST(GgufMalformed, TruncationMessageNamesTheKeyAndPosition) {
  const std::vector<uint8_t> full = GgufBuilder().Kv("first", Val::U8(1))
      .Kv("tokenizer.ggml.tokens", Val::Arr(t::kTString, {Val::Str("aaaa"), Val::Str("bbbb")}))
      .Build();
  auto f = GgufFile::FromMemory(full.data(), full.size() - 2);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find(
                "GGUF <memory>: truncated while reading metadata key #1 ('tokenizer.ggml.tokens')"
                " array of 2 strings (element 1) at byte"), std::string::npos)
      << f.status().message();
  EXPECT_NE(f.status().message().find("(file is " + std::to_string(full.size() - 2) + " bytes)"),
            std::string::npos) << f.status().message();
}

TEST(GgufMalformed, HugeStringLengthFailsWithoutAllocating) {
  ExpectError(GgufBuilder().Kv("k", Val::StrWithLength(1ull << 60, "abc")).Build(),
              ErrorCode::kDataLoss, "string value of 1152921504606846976 bytes");
  ExpectError(GgufBuilder().Kv("k", Val::StrWithLength(UINT64_MAX, "")).Build(),
              ErrorCode::kDataLoss, "truncated");
}

TEST(GgufMalformed, HugeKeyLengthFailsWithoutAllocating) {
  std::vector<uint8_t> b = GgufBuilder().Kv("key", Val::U8(1)).Build();
  b[24 + 7] = 0x10;  // key length (u64 at byte 24) becomes 2^60 + 3
  ExpectError(b, ErrorCode::kDataLoss, "metadata key #0 key of 1152921504606846979 bytes");
}

TEST(GgufMalformed, HugeArrayCountFailsWithoutAllocating) {
  ExpectError(GgufBuilder().Kv("tokenizer.ggml.tokens",
                               Val::ArrRaw(t::kTString, 1ull << 60, Bytes(16))).Build(),
              ErrorCode::kDataLoss,
              "metadata key #0 ('tokenizer.ggml.tokens') array of 1152921504606846976 strings");
  ExpectError(GgufBuilder().Kv("k", Val::ArrRaw(t::kTArray, UINT64_MAX, {})).Build(),
              ErrorCode::kDataLoss, "array of 18446744073709551615 arrays");
  ExpectError(GgufBuilder().Kv("k", Val::ArrRaw(t::kTF64, 3, Bytes(23))).Build(),
              ErrorCode::kDataLoss, "array of 3 f64s");
}

TEST(GgufMalformed, HugeHeaderCountsFail) {
  ExpectError(GgufBuilder().KvCount(1ull << 62).Build(), ErrorCode::kDataLoss,
              "4611686018427387904 metadata entries");
  ExpectError(GgufBuilder().TensorCount(UINT64_MAX).Build(), ErrorCode::kDataLoss,
              "18446744073709551615 tensor infos");
}

TEST(GgufMalformed, DeepNestingIsRejected) {
  Val v = Val::Arr(t::kTU8, {Val::U8(1)});
  for (int i = 0; i < 20; ++i) v = Val::Arr(t::kTArray, {v});
  ExpectError(GgufBuilder().Kv("deep", v).Build(), ErrorCode::kDataLoss, "nested deeper than");
}

TEST(GgufMalformed, UnknownValueTypesAndBadBools) {
  ExpectError(GgufBuilder().Kv("k", Val{13, {}}).Build(), ErrorCode::kDataLoss,
              "metadata key #0 ('k') has unknown value type 13");
  ExpectError(GgufBuilder().Kv("k", Val::ArrRaw(99, 0, {})).Build(), ErrorCode::kDataLoss,
              "unknown array element type 99");
  ExpectError(GgufBuilder().Kv("k", Val{t::kTBool, {2}}).Build(), ErrorCode::kDataLoss,
              "bool value 2");
  ExpectError(GgufBuilder().Kv("k", Val::U8(1)).Kv("k", Val::U8(2)).Build(), ErrorCode::kDataLoss,
              "duplicate metadata key 'k'");
}

TEST(GgufMalformed, BadAlignment) {
  ExpectError(GgufBuilder().Kv("general.alignment", Val::U32(0)).Build(), ErrorCode::kDataLoss,
              "general.alignment 0 is not a power of two");
  ExpectError(GgufBuilder().Kv("general.alignment", Val::U32(48)).Build(), ErrorCode::kDataLoss,
              "general.alignment 48 is not a power of two");
  ExpectError(GgufBuilder().Kv("general.alignment", Val::U64(32)).Build(), ErrorCode::kDataLoss,
              "general.alignment has type u64, expected u32");
}

TEST(GgufMalformed, TensorDataOutOfBounds) {
  ExpectError(GgufBuilder().TensorInfoOnly("w", {4, 4}, 0, 0).Build(), ErrorCode::kDataLoss,
              "tensor 'w' data");
  ExpectError(GgufBuilder().Tensor("a", {8}, 0, Bytes(32)).TensorInfoOnly("b", {8}, 0, 32).Build(),
              ErrorCode::kDataLoss, "runs past the end of the file");
  ExpectError(GgufBuilder().TensorInfoOnly("w", {1}, 0, 0xFFFFFFFFFFFFFFE0ull).Build(),
              ErrorCode::kDataLoss, "tensor 'w' data");
}

TEST(GgufMalformed, MisalignedTensorOffset) {
  ExpectError(GgufBuilder().Tensor("a", {64}, 0, Bytes(256)).TensorInfoOnly("b", {1}, 0, 4).Build(),
              ErrorCode::kDataLoss, "tensor #1 ('b') has offset 4, not a multiple of the alignment 32");
}

TEST(GgufMalformed, UnknownTensorTypeIsUnimplemented) {
  ExpectError(GgufBuilder().TensorInfoOnly("blk.0.w", {32}, 99, 0).Build(),
              ErrorCode::kUnimplemented, "tensor #0 ('blk.0.w') has tensor type id 99");
  ExpectError(GgufBuilder().TensorInfoOnly("w", {32}, 1000, 0).Build(), ErrorCode::kUnimplemented,
              "type id 1000");  // an engine-internal id is not a file type
}

TEST(GgufMalformed, BadDimensionCounts) {
  ExpectError(GgufBuilder().TensorInfoOnly("w", {}, 0, 0).Build(), ErrorCode::kDataLoss,
              "tensor #0 ('w') has 0 dimensions (expected 1..4)");
  ExpectError(GgufBuilder().TensorInfoOnly("w", {1, 1, 1, 1, 1}, 0, 0).Build(),
              ErrorCode::kDataLoss, "has 5 dimensions");
}

TEST(GgufMalformed, BadDimensions) {
  ExpectError(GgufBuilder().TensorInfoOnly("w", {4, 0}, 0, 0).Build(), ErrorCode::kDataLoss,
              "invalid dimension 1 = 0");
  ExpectError(GgufBuilder().TensorInfoOnly("w", {1ull << 32, 1ull << 32}, 0, 0).Build(),
              ErrorCode::kDataLoss, "invalid dimension 1");
  ExpectError(GgufBuilder().TensorInfoOnly("w", {UINT64_MAX}, 0, 0).Build(), ErrorCode::kDataLoss,
              "invalid dimension 0");
  ExpectError(GgufBuilder().TensorInfoOnly("w", {1ull << 62}, 14, 0).Build(), ErrorCode::kDataLoss,
              "");  // numel fits, bytes do not: too large or out of bounds, never a wrap-around
  ExpectError(GgufBuilder().TensorInfoOnly("w", {48, 2}, 8, 0).Build(), ErrorCode::kDataLoss,
              "dims[0] = 48, not a multiple of the block size 32");
}

TEST(GgufMalformed, DuplicateTensorName) {
  ExpectError(GgufBuilder().Tensor("w", {1}, 0, Bytes(4)).Tensor("w", {1}, 0, Bytes(4)).Build(),
              ErrorCode::kDataLoss, "duplicate tensor name 'w'");
}

TEST(GgufMalformed, OverlongTensorName) {
  ExpectError(GgufBuilder().TensorInfoOnly(std::string(5000, 'n'), {1}, 0, 0).Build(),
              ErrorCode::kDataLoss, "is 5000 bytes long (limit 4096)");
}

// Found by gguf_fuzzer in a mutation check (a reader with the tensor bounds check removed crashed
// on it within seconds, see docs/fuzzing.md): a tensor offset of ~1.8e19 that must be rejected.
TEST(GgufMalformed, FuzzerFoundHugeTensorOffset) {
  const std::vector<uint8_t> input = {
      0x47, 0x47, 0x55, 0x46, 0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x78, 0x03, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xfb, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x47, 0x47, 0x55, 0x46, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  ExpectError(input, ErrorCode::kDataLoss, "tensor 'x' data [96 + 18086456103519911936, +96 bytes)"
              " runs past the end of the file (201 bytes)");
}

// ---- The real model -------------------------------------------------------------------------

// Row 0 of the first tensor of each type, dequantized by the `gguf` Python package 0.19
// (gguf.GGUFReader + gguf.quants.dequantize) with tools/gguf_dequant_expectations.py on
// gemma-3-270m-q4_k_m.gguf; `sum` is the float64 sum of the whole row.
struct RowExpectation {
  const char* tensor;
  DType type;
  int64_t row_len;
  std::vector<std::pair<int, float>> values;
  double sum;
};

const std::vector<RowExpectation>& GemmaExpectations() {
  static const std::vector<RowExpectation> e = {
      {"output_norm.weight", DType::kF32, 640, {{0, 7.125f}, {1, 9.5625f}, {2, 47.f}, {31, 28.875f}, {32, 15.25f}, {100, 7.1875f}, {255, 14.875f}, {256, 14.375f}, {639, 21.625f}}, 16861.6953},
      {"token_embd.weight", DType::kQ8_0, 640, {{0, -0.00724411f}, {1, 0.042860985f}, {2, -0.034409523f}, {31, -0.05372715f}, {32, -0.046325684f}, {100, 0.049342155f}, {255, 0.0534935f}, {256, 0.035982132f}, {639, -0.017424583f}}, -0.0424766541},
      {"blk.0.attn_k.weight", DType::kQ5_0, 640, {{0, 0.f}, {1, -0.027557373f}, {2, 0.011810303f}, {31, 0.0039367676f}, {32, -0.032409668f}, {100, -0.07421875f}, {255, -0.01020813f}, {256, -0.019042969f}, {639, -0.030548096f}}, -0.535934448},
      {"blk.0.attn_output.weight", DType::kQ4_K, 1024, {{0, -0.015705109f}, {1, 0.049669266f}, {2, -0.037496567f}, {31, -0.059288025f}, {32, 0.023014069f}, {100, 0.013008118f}, {255, 0.03899288f}, {256, -0.023250937f}, {639, -0.015106082f}}, 1.00646448},
      {"blk.0.ffn_down.weight", DType::kQ6_K, 2048, {{0, 0.005211711f}, {1, 0.021715462f}, {2, -0.025189936f}, {31, -0.015193462f}, {32, -0.014545679f}, {100, 0.029739141f}, {255, 0.018108487f}, {256, -0.016593933f}, {639, 0.016630054f}}, 0.522422314},
  };
  return e;
}

TEST(GgufRealModel, Gemma3_270mParsesAndDequantizesLikeTheGgufPythonPackage) {
  const std::string path = std::string(UP_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
  UP_REQUIRE_ASSET(path, "the default model");
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  const GgufFile& g = *f.value();
  EXPECT_EQ(g.tensors().size(), 236u);
  EXPECT_EQ(g.GetString("general.architecture").value(), "gemma3");
  EXPECT_EQ(g.GetStringArray("tokenizer.ggml.tokens")->size(), 262144u);
  const TensorInfo* emb = g.FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, DType::kQ8_0);
  EXPECT_EQ(emb->View().shape[0], 262144);
  EXPECT_EQ(emb->View().shape[1], 640);
  for (const RowExpectation& e : GemmaExpectations()) {
    const TensorInfo* t = g.FindTensor(e.tensor);
    ASSERT_NE(t, nullptr) << e.tensor;
    ASSERT_EQ(t->type, e.type) << e.tensor;
    ASSERT_EQ(t->dims[0], e.row_len) << e.tensor;
    std::vector<float> row(static_cast<size_t>(e.row_len));
    ASSERT_TRUE(Dequantize(t->type, t->data, row.data(), e.row_len).ok());
    for (const auto& [i, want] : e.values) {
      EXPECT_NEAR(row[i], want, 1e-6f * std::fabs(want) + 1e-9f) << e.tensor << " [" << i << "]";
    }
    double sum = 0;
    for (float x : row) sum += x;
    EXPECT_NEAR(sum, e.sum, 1e-5 * (std::fabs(e.sum) + 1)) << e.tensor;
  }
}

}  // namespace
}  // namespace uniprefill::gguf
