// safetensors reader: round trips of files written by a small writer below (every supported dtype,
// 0-d to 4-d shapes, metadata), malformed files that must each fail with a clear error and never
// crash (truncation at every byte, bad JSON, offsets out of range or overlapping, unsupported
// dtypes), and checkpoint directories (single file, sharded index, broken indexes).
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "io/gguf.h"
#include "io/hf_config.h"

namespace uniprefill::safetensors {
namespace {

namespace fs = std::filesystem;

// ---- A small safetensors writer -------------------------------------------------------------

struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

template <typename T>
std::vector<uint8_t> BytesOf(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Writes exactly what it is given, so tests can build valid files (the header padded with spaces to
// a multiple of 8 as the reference writer does) and malformed ones (any header text or length).
class Writer {
 public:
  Writer& Add(std::string name, std::string dtype, std::vector<int64_t> shape,
              std::vector<uint8_t> bytes) {
    tensors_.push_back({std::move(name), std::move(dtype), std::move(shape), std::move(bytes)});
    return *this;
  }
  Writer& F32(std::string name, std::vector<int64_t> shape, const std::vector<float>& v) {
    return Add(std::move(name), "F32", std::move(shape), BytesOf(v));
  }
  Writer& Metadata(std::string json_object) {
    metadata_ = std::move(json_object);
    return *this;
  }

  // The JSON header with consecutive data offsets.
  std::string Header() const {
    std::string h = "{";
    if (!metadata_.empty()) h += "\"__metadata__\":" + metadata_;
    uint64_t off = 0;
    for (const RawTensor& t : tensors_) {
      if (h.size() > 1) h += ",";
      h += "\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
      for (size_t d = 0; d < t.shape.size(); ++d) {
        if (d > 0) h += ",";
        h += std::to_string(t.shape[d]);
      }
      h += "],\"data_offsets\":[" + std::to_string(off) + "," +
           std::to_string(off + t.bytes.size()) + "]}";
      off += t.bytes.size();
    }
    return h + "}";
  }
  std::vector<uint8_t> Data() const {
    std::vector<uint8_t> d;
    for (const RawTensor& t : tensors_) d.insert(d.end(), t.bytes.begin(), t.bytes.end());
    return d;
  }
  std::vector<uint8_t> Build() const { return Assemble(Header(), Data()); }

  // 8-byte length, `header` padded with spaces to a multiple of 8, then `data`.
  static std::vector<uint8_t> Assemble(std::string header, const std::vector<uint8_t>& data) {
    while (header.size() % 8 != 0) header += ' ';
    return AssembleRaw(header.size(), header, data);
  }
  // Any header length field, unpadded header text, then `data`.
  static std::vector<uint8_t> AssembleRaw(uint64_t header_len, const std::string& header,
                                          const std::vector<uint8_t>& data) {
    std::vector<uint8_t> out(8 + header.size() + data.size());
    std::memcpy(out.data(), &header_len, 8);
    std::memcpy(out.data() + 8, header.data(), header.size());
    if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
    return out;
  }

 private:
  std::vector<RawTensor> tensors_;
  std::string metadata_;
};

void WriteFile(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
void WriteFile(const fs::path& path, const std::string& text) {
  WriteFile(path, std::vector<uint8_t>(text.begin(), text.end()));
}

// A fresh empty directory per test.
fs::path TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) / "uniprefill_safetensors" /
                 (std::string(info->test_suite_name()) + "." + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

Result<std::unique_ptr<SafetensorsFile>> Parse(const std::vector<uint8_t>& bytes) {
  return SafetensorsFile::FromMemory(bytes.data(), bytes.size(), "test.safetensors");
}

// Parses `bytes`, expects failure with `code` and a message containing `needle`.
void ExpectError(const std::vector<uint8_t>& bytes, ErrorCode code, const std::string& needle) {
  auto f = Parse(bytes);
  ASSERT_FALSE(f.ok()) << "expected an error containing: " << needle;
  EXPECT_EQ(f.status().code(), code) << f.status().message();
  EXPECT_NE(f.status().message().find(needle), std::string::npos)
      << "message: " << f.status().message() << "\nexpected to contain: " << needle;
}

// A header with one tensor entry `spec` (a JSON object text) and `data_bytes` zero bytes of data.
std::vector<uint8_t> OneTensor(const std::string& spec, size_t data_bytes) {
  return Writer::Assemble("{\"w\":" + spec + "}", std::vector<uint8_t>(data_bytes, 0));
}

uint16_t Bf16Bits(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);
}

// ---- Valid files ----------------------------------------------------------------------------

TEST(SafetensorsFile, RoundTripsEveryDTypeThroughTheMapping) {
  const fs::path path = TestDir() / "model.safetensors";
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  const std::vector<uint16_t> h = {0x3c00, 0xc000, 0x3800};  // f16 1, -2, 0.5
  const std::vector<uint16_t> b = {Bf16Bits(1.5f), Bf16Bits(-3.0f)};
  WriteFile(path, Writer()
                      .F32("model.layers.0.mlp.down_proj.weight", {2, 3}, w)
                      .Add("half", "F16", {3}, BytesOf(h))
                      .Add("brain", "BF16", {1, 2}, BytesOf(b))
                      .Metadata(R"({"format":"pt"})")
                      .Build());
  auto f = SafetensorsFile::Open(path.string());
  ASSERT_TRUE(f.ok()) << f.status().message();
  const SafetensorsFile& st = *f.value();
  ASSERT_EQ(st.tensors().size(), 3u);
  EXPECT_EQ(st.tensors()[0].name, "model.layers.0.mlp.down_proj.weight");  // data order
  EXPECT_EQ(st.metadata().at("format"), "pt");

  const TensorEntry* t = st.Find("model.layers.0.mlp.down_proj.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::kF32);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));  // [out, in] as stored
  EXPECT_EQ(t->n_bytes, 24u);
  const TensorView v = t->View();
  EXPECT_EQ(v.ndim, 2);
  EXPECT_EQ(v.shape[0], 2);
  EXPECT_EQ(v.shape[1], 3);
  EXPECT_EQ(v.stride[0], 3);
  EXPECT_EQ(v.stride[1], 1);
  EXPECT_EQ(v.row<float>(1)[2], 6.0f);
  EXPECT_TRUE(v.is_contiguous());

  const TensorEntry* half = st.Find("half");
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(half->dtype, DType::kF16);
  EXPECT_EQ(half->View().ndim, 1);
  EXPECT_EQ(half->View().as<uint16_t>()[1], 0xc000);

  const TensorEntry* brain = st.Find("brain");
  ASSERT_NE(brain, nullptr);
  EXPECT_EQ(brain->dtype, DType::kBF16);
  EXPECT_EQ(brain->View().ShapeString(), "BF16 [1, 2]");
  EXPECT_EQ(brain->View().as<uint16_t>()[1], Bf16Bits(-3.0f));
  EXPECT_EQ(st.Find("missing"), nullptr);
}

TEST(SafetensorsFile, ViewsKeepHigherRankShapesAndScalars) {
  const std::vector<float> conv(2 * 1 * 4), four(2 * 3 * 1 * 2), one = {7.0f};
  auto f = Parse(Writer()
                     .F32("conv1d.weight", {2, 1, 4}, conv)
                     .F32("four", {2, 3, 1, 2}, four)
                     .F32("scalar", {}, one)
                     .F32("empty", {0, 5}, {})
                     .Build());
  ASSERT_TRUE(f.ok()) << f.status().message();
  const TensorView c = f.value()->Find("conv1d.weight")->View();
  EXPECT_EQ(c.ndim, 3);
  EXPECT_EQ(c.shape[2], 4);
  EXPECT_EQ(c.stride[0], 4);
  const TensorView v4 = f.value()->Find("four")->View();
  EXPECT_EQ(v4.ndim, 4);
  EXPECT_EQ(v4.stride[0], 6);
  EXPECT_EQ(v4.numel(), 12);
  const TensorView s = f.value()->Find("scalar")->View();
  EXPECT_EQ(s.ndim, 1);
  EXPECT_EQ(s.shape[0], 1);
  EXPECT_EQ(*s.as<float>(), 7.0f);
  EXPECT_TRUE(f.value()->Find("scalar")->shape.empty());
  EXPECT_EQ(f.value()->Find("empty")->n_bytes, 0u);
  EXPECT_EQ(f.value()->Find("empty")->numel(), 0);
}

TEST(SafetensorsFile, AcceptsAnEmptyHeaderObjectAndNullMetadata) {
  auto f = Parse(Writer::Assemble("{}", {}));
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_TRUE(f.value()->tensors().empty());
  auto g = Parse(Writer::Assemble(R"({"__metadata__":null})", {}));
  ASSERT_TRUE(g.ok()) << g.status().message();
}

// ---- Truncated and non-safetensors files -------------------------------------------------

TEST(SafetensorsFile, EveryTruncationFailsCleanly) {
  const std::vector<uint8_t> full =
      Writer().F32("a", {2, 2}, {1, 2, 3, 4}).F32("b", {3}, {5, 6, 7}).Build();
  for (size_t n = 0; n < full.size(); ++n) {
    const std::vector<uint8_t> cut(full.begin(), full.begin() + n);
    auto f = Parse(cut);
    ASSERT_FALSE(f.ok()) << "a file cut to " << n << " of " << full.size() << " bytes parsed";
    EXPECT_EQ(f.status().code(), ErrorCode::kDataLoss) << f.status().message();
    EXPECT_NE(f.status().message().find("test.safetensors"), std::string::npos);
  }
}

// Random byte overwrites of a valid file either parse (then every tensor lies inside the buffer)
// or fail with a Status; run under the sanitizers this is a small fuzzer.
TEST(SafetensorsFile, RandomCorruptionsNeverCrash) {
  const std::vector<uint8_t> valid = Writer()
                                         .F32("model.embed_tokens.weight", {4, 2}, std::vector<float>(8, 1))
                                         .Add("b", "BF16", {3}, std::vector<uint8_t>(6, 7))
                                         .Add("h", "F16", {1, 1}, std::vector<uint8_t>(2, 9))
                                         .Build();
  std::mt19937 rng(1234);
  const std::string alphabet = "{}[]\",:0123456789-eE.FBI ";
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> bytes = valid;
    const int n_edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < n_edits; ++e) {
      const size_t pos = rng() % bytes.size();
      bytes[pos] = (rng() % 2) ? static_cast<uint8_t>(alphabet[rng() % alphabet.size()])
                               : static_cast<uint8_t>(rng());
    }
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    auto f = Parse(bytes);
    if (!f.ok()) continue;
    for (const TensorEntry& t : f.value()->tensors()) {
      const uint8_t* base = nullptr;
      ASSERT_NE(t.data, base);
      ASSERT_EQ(t.n_bytes, static_cast<uint64_t>(t.numel()) * (t.dtype == DType::kF32 ? 4 : 2));
    }
  }
}

TEST(SafetensorsFile, ShortFileNamesTheHeaderLength) {
  ExpectError({1, 2, 3}, ErrorCode::kDataLoss, "shorter than the 8-byte header length");
}

TEST(SafetensorsFile, HeaderPastTheEndIsTruncation) {
  ExpectError(Writer::AssembleRaw(64, "{}", {}), ErrorCode::kDataLoss,
              "header of 64 bytes runs past the end of the file (10 bytes");
}

TEST(SafetensorsFile, HugeHeaderLengthIsRejectedBeforeReading) {
  ExpectError(Writer::AssembleRaw(~0ull, "{}", {}), ErrorCode::kDataLoss, "exceeds the limit");
}

TEST(SafetensorsFile, TruncatedDataNamesTheTensor) {
  std::vector<uint8_t> bytes = Writer().F32("a", {4}, {1, 2, 3, 4}).Build();
  bytes.resize(bytes.size() - 1);
  ExpectError(bytes, ErrorCode::kDataLoss,
              "tensor 'a' data [0, 16) runs past the end of the data buffer (15 bytes");
}

TEST(SafetensorsFile, MissingFileIsNotFound) {
  auto f = SafetensorsFile::Open((TestDir() / "nope.safetensors").string());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(f.status().message().find("nope.safetensors: cannot open"), std::string::npos);
}

TEST(SafetensorsFile, DirectoryIsNotAFile) {
  auto f = SafetensorsFile::Open(TestDir().string());
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("not a regular file"), std::string::npos);
}

// ---- Bad header JSON ------------------------------------------------------------------------

TEST(SafetensorsFile, GgufOrOtherBytesAreNotAHeader) {
  ExpectError(Writer::Assemble("GGUF....", {}), ErrorCode::kDataLoss,
              "header does not start with '{'");
  ExpectError(Writer::Assemble("[1,2]", {}), ErrorCode::kDataLoss, "does not start with '{'");
}

TEST(SafetensorsFile, InvalidJsonNamesTheParseError) {
  ExpectError(Writer::Assemble(R"({"w": {"dtype": "F32",)", {}), ErrorCode::kDataLoss,
              "header is not a valid JSON object: invalid JSON (");
  ExpectError(Writer::Assemble("{}x", {}), ErrorCode::kDataLoss, "invalid JSON");
}

TEST(SafetensorsFile, DuplicateTensorNameIsRejected) {
  const std::string spec = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  ExpectError(Writer::Assemble("{\"w\":" + spec + ",\"w\":" + spec + "}", std::vector<uint8_t>(4)),
              ErrorCode::kDataLoss, "key 'w' appears twice");
}

TEST(SafetensorsFile, MalformedEntriesNameTheTensorAndField) {
  ExpectError(OneTensor("[1]", 0), ErrorCode::kDataLoss, "tensor 'w' is [1], expected an object");
  ExpectError(OneTensor(R"({"shape":[1],"data_offsets":[0,4]})", 4), ErrorCode::kDataLoss,
              "tensor 'w' has no \"dtype\"");
  ExpectError(OneTensor(R"({"dtype":"F32","data_offsets":[0,4]})", 4), ErrorCode::kDataLoss,
              "has no \"shape\"");
  ExpectError(OneTensor(R"({"dtype":"F32","shape":[1]})", 4), ErrorCode::kDataLoss,
              "has no \"data_offsets\"");
  ExpectError(OneTensor(R"({"dtype":7,"shape":[1],"data_offsets":[0,4]})", 4),
              ErrorCode::kDataLoss, "has dtype 7, expected a string");
  ExpectError(OneTensor(R"({"dtype":"F32","shape":"1","data_offsets":[0,4]})", 4),
              ErrorCode::kDataLoss, "has shape \"1\", expected an array");
  ExpectError(OneTensor(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})", 4),
              ErrorCode::kDataLoss, "has invalid dimension 0 = -1");
  ExpectError(OneTensor(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})", 4),
              ErrorCode::kDataLoss, "has invalid dimension 0 = 1.5");
  ExpectError(OneTensor(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})",
                        4),
              ErrorCode::kDataLoss, "has invalid dimension 1");
  ExpectError(OneTensor(R"({"dtype":"F32","shape":[1],"data_offsets":[0]})", 4),
              ErrorCode::kDataLoss, "has data_offsets [0], expected [begin, end]");
  ExpectError(Writer::Assemble(R"({"__metadata__":{"a":1}})", {}), ErrorCode::kDataLoss,
              "__metadata__ entry 'a' is 1, expected a string");
}

// ---- Offsets and sizes ----------------------------------------------------------------------

TEST(SafetensorsFile, OffsetsOutOfRangeAreRejected) {
  ExpectError(OneTensor(R"({"dtype":"F32","shape":[2],"data_offsets":[8,16]})", 8),
              ErrorCode::kDataLoss, "tensor 'w' data [8, 16) runs past the end of the data buffer");
  ExpectError(OneTensor(R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})", 8),
              ErrorCode::kDataLoss, "data_offsets [8, 4] with begin > end");
  ExpectError(OneTensor(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})", 8),
              ErrorCode::kDataLoss, "has data_offsets [-4,0]");
  ExpectError(OneTensor(R"({"dtype":"F32","shape":[1],)"
                        R"("data_offsets":[18446744073709551612,18446744073709551615]})",
                        8),
              ErrorCode::kDataLoss, "runs past the end of the data buffer");
}

TEST(SafetensorsFile, SizeMustMatchDTypeAndShape) {
  ExpectError(OneTensor(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,20]})", 24),
              ErrorCode::kDataLoss,
              "tensor 'w' has 20 data bytes, but dtype F32 and shape [2, 3] need 24");
  ExpectError(OneTensor(R"({"dtype":"BF16","shape":[3],"data_offsets":[0,12]})", 12),
              ErrorCode::kDataLoss, "need 6");
}

TEST(SafetensorsFile, OverlappingTensorsAreRejected) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  ExpectError(Writer::Assemble(header, std::vector<uint8_t>(12)), ErrorCode::kDataLoss,
              "tensors 'a' [0, 8) and 'b' [4, 12) overlap");
}

TEST(SafetensorsFile, GapsBetweenTensorsAreAllowed) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                             R"("b":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
  auto f = Parse(Writer::Assemble(header, std::vector<uint8_t>(12)));
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f.value()->tensors()[0].name, "b");  // sorted by offset
}

// ---- DTypes and ranks -----------------------------------------------------------------------

TEST(SafetensorsFile, UnsupportedDTypeIsUnimplementedAndNamesIt) {
  ExpectError(OneTensor(R"({"dtype":"I64","shape":[1],"data_offsets":[0,8]})", 8),
              ErrorCode::kUnimplemented,
              "tensor 'w' has dtype I64, which this engine does not read (supported: F32, F16, "
              "BF16)");
  ExpectError(OneTensor(R"({"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]})", 4),
              ErrorCode::kUnimplemented, "dtype F8_E4M3");
}

TEST(SafetensorsFile, UnknownDTypeIsDataLoss) {
  ExpectError(OneTensor(R"({"dtype":"Q4_K","shape":[1],"data_offsets":[0,4]})", 4),
              ErrorCode::kDataLoss, "tensor 'w' has unknown dtype 'Q4_K'");
}

TEST(SafetensorsFile, MoreThanFourDimsIsUnimplemented) {
  ExpectError(OneTensor(R"({"dtype":"F32","shape":[1,1,1,1,1],"data_offsets":[0,4]})", 4),
              ErrorCode::kUnimplemented, "has 5 dimensions; this engine reads at most 4");
}

// ---- Checkpoint directories -----------------------------------------------------------------

TEST(SafetensorsCheckpoint, OpensASingleFileDirectory) {
  const fs::path dir = TestDir();
  WriteFile(dir / "model.safetensors",
            Writer().F32("model.norm.weight", {2}, {1, 1}).F32("lm_head.weight", {2, 2}, {1, 2, 3, 4}).Build());
  auto c = Checkpoint::Open(dir.string());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value()->Names(), (std::vector<std::string>{"lm_head.weight", "model.norm.weight"}));
  EXPECT_EQ(c.value()->files().size(), 1u);
  const TensorEntry* t = c.value()->Find("lm_head.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->View().row<float>(1)[0], 3.0f);
  EXPECT_EQ(c.value()->Find("model.embed_tokens.weight"), nullptr);
}

TEST(SafetensorsCheckpoint, OpensAFilePathDirectly) {
  const fs::path path = TestDir() / "weights.safetensors";
  WriteFile(path, Writer().F32("x", {1}, {2}).Build());
  auto c = Checkpoint::Open(path.string());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value()->size(), 1u);
}

// Two shards and their index, as transformers' save_pretrained writes them.
void WriteShardedCheckpoint(const fs::path& dir, const std::string& weight_map) {
  WriteFile(dir / "model-00001-of-00002.safetensors",
            Writer().F32("model.embed_tokens.weight", {2, 2}, {1, 2, 3, 4}).Build());
  WriteFile(dir / "model-00002-of-00002.safetensors",
            Writer().F32("model.norm.weight", {2}, {5, 6}).F32("lm_head.weight", {1, 2}, {7, 8}).Build());
  WriteFile(dir / "model.safetensors.index.json",
            R"({"metadata": {"total_size": 32}, "weight_map": )" + weight_map + "}");
}

const char* kGoodWeightMap = R"({"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
   "model.norm.weight": "model-00002-of-00002.safetensors",
   "lm_head.weight": "model-00002-of-00002.safetensors"})";

TEST(SafetensorsCheckpoint, OpensEveryShardOfAnIndex) {
  const fs::path dir = TestDir();
  WriteShardedCheckpoint(dir, kGoodWeightMap);
  auto c = Checkpoint::Open(dir.string());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value()->files().size(), 2u);
  EXPECT_EQ(c.value()->Names(), (std::vector<std::string>{"lm_head.weight",
                                                           "model.embed_tokens.weight",
                                                           "model.norm.weight"}));
  EXPECT_EQ(c.value()->Find("model.norm.weight")->View().as<float>()[1], 6.0f);
  EXPECT_EQ(c.value()->Find("model.embed_tokens.weight")->View().row<float>(1)[1], 4.0f);
}

TEST(SafetensorsCheckpoint, IndexWinsOverASingleFile) {
  const fs::path dir = TestDir();
  WriteShardedCheckpoint(dir, kGoodWeightMap);
  WriteFile(dir / "model.safetensors", std::string("garbage"));
  auto c = Checkpoint::Open(dir.string());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value()->size(), 3u);
}

TEST(SafetensorsCheckpoint, MissingShardIsNotFound) {
  const fs::path dir = TestDir();
  WriteShardedCheckpoint(dir, R"({"a": "model-00003-of-00003.safetensors"})");
  auto c = Checkpoint::Open(dir.string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(c.status().message().find("shard 'model-00003-of-00003.safetensors' named in "
                                      "model.safetensors.index.json does not exist"),
            std::string::npos)
      << c.status().message();
}

TEST(SafetensorsCheckpoint, TensorInTheWrongShardIsRejected) {
  const fs::path dir = TestDir();
  WriteShardedCheckpoint(dir, R"({"model.embed_tokens.weight": "model-00002-of-00002.safetensors",
      "model.norm.weight": "model-00001-of-00002.safetensors"})");
  auto c = Checkpoint::Open(dir.string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kDataLoss);
  EXPECT_NE(c.status().message().find("tensor 'model.embed_tokens.weight' is mapped to shard "
                                      "'model-00002-of-00002.safetensors', which does not hold it"),
            std::string::npos)
      << c.status().message();
}

TEST(SafetensorsCheckpoint, SameTensorInTwoShardsIsRejected) {
  const fs::path dir = TestDir();
  WriteShardedCheckpoint(dir, kGoodWeightMap);
  WriteFile(dir / "model-00002-of-00002.safetensors",
            Writer().F32("model.embed_tokens.weight", {1}, {0}).F32("model.norm.weight", {2}, {5, 6})
                .F32("lm_head.weight", {1, 2}, {7, 8}).Build());
  auto c = Checkpoint::Open(dir.string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tensor 'model.embed_tokens.weight' is in both"),
            std::string::npos)
      << c.status().message();
}

TEST(SafetensorsCheckpoint, MalformedIndexIsDataLoss) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"weight_map\": ", "invalid JSON"},
      {R"({"metadata": {}})", "has no \"weight_map\" object"},
      {R"({"weight_map": []})", "has no \"weight_map\" object"},
      {R"({"weight_map": {}})", "weight_map is empty"},
      {R"({"weight_map": {"a": 3}})", "weight_map entry 'a' is 3"},
      {R"({"weight_map": {"a": "../secret.safetensors"}})", "inside the checkpoint directory"},
      {R"({"weight_map": {"a": "/etc/passwd"}})", "inside the checkpoint directory"},
  };
  for (const auto& [index, needle] : cases) {
    const fs::path dir = TestDir();
    WriteFile(dir / "model.safetensors.index.json", index);
    auto c = Checkpoint::Open(dir.string());
    ASSERT_FALSE(c.ok()) << index;
    EXPECT_EQ(c.status().code(), ErrorCode::kDataLoss) << c.status().message();
    EXPECT_NE(c.status().message().find(needle), std::string::npos)
        << "message: " << c.status().message() << "\nexpected to contain: " << needle;
  }
}

TEST(SafetensorsCheckpoint, MalformedShardNamesTheShard) {
  const fs::path dir = TestDir();
  WriteShardedCheckpoint(dir, kGoodWeightMap);
  WriteFile(dir / "model-00002-of-00002.safetensors", std::string("{}"));
  auto c = Checkpoint::Open(dir.string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kDataLoss);
  EXPECT_NE(c.status().message().find("model-00002-of-00002.safetensors: file is 2 bytes"),
            std::string::npos)
      << c.status().message();
}

TEST(SafetensorsCheckpoint, DirectoryWithoutWeightsSaysWhatItLooksFor) {
  const fs::path dir = TestDir();
  auto c = Checkpoint::Open(dir.string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(c.status().message().find("has neither model.safetensors nor "
                                      "model.safetensors.index.json"),
            std::string::npos)
      << c.status().message();
  auto missing = Checkpoint::Open((dir / "absent").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no such file or directory"), std::string::npos);
}

// ---- The committed tiny Hugging Face checkpoints ---------------------------------------------

// Every tiny checkpoint opens, and its embedding and layer count agree with its config.json.
TEST(SafetensorsGoldens, TinyCheckpointsMatchTheirConfigs) {
  const fs::path root = fs::path(UP_SOURCE_DIR) / "tests/goldens/hf_tiny";
  for (const char* family : {"llama", "qwen3_next", "gemma3"}) {
    SCOPED_TRACE(family);
    const fs::path dir = root / family;
    ASSERT_TRUE(IsHfCheckpointDir(dir.string()));
    auto cfg = HfConfig::Load((dir / "config.json").string());
    ASSERT_TRUE(cfg.ok()) << cfg.status().message();
    auto ckpt = Checkpoint::Open(dir.string());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    const TensorEntry* embed = ckpt.value()->Find("model.embed_tokens.weight");
    ASSERT_NE(embed, nullptr);
    EXPECT_EQ(embed->shape,
              (std::vector<int64_t>{*cfg->GetInt("vocab_size"), *cfg->GetInt("hidden_size")}));
    const int64_t layers = *cfg->GetInt("num_hidden_layers");
    EXPECT_NE(ckpt.value()->Find("model.layers." + std::to_string(layers - 1) +
                                 ".input_layernorm.weight"),
              nullptr);
    EXPECT_EQ(ckpt.value()->Find("model.layers." + std::to_string(layers) +
                                 ".input_layernorm.weight"),
              nullptr);
  }
}

float Bf16ToF32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f = 0;
  std::memcpy(&f, &u, 4);
  return f;
}

// hf_tiny/gemma3/model.gguf holds the safetensors weights (bf16, widened to f32) under llama.cpp's
// names, with 1 added to every norm weight, so a GGUF-fed and a safetensors-fed Gemma 3 must agree.
TEST(SafetensorsGoldens, Gemma3GgufHoldsTheSameWeightsWithNormsPlusOne) {
  const fs::path dir = fs::path(UP_SOURCE_DIR) / "tests/goldens/hf_tiny/gemma3";
  auto ckpt = Checkpoint::Open(dir.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  auto gg = gguf::GgufFile::Open((dir / "model.gguf").string());
  ASSERT_TRUE(gg.ok()) << gg.status().message();
  const std::vector<std::pair<std::string, std::string>> per_layer = {
      {"input_layernorm", "attn_norm"},         {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},           {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"},      {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"},      {"post_attention_layernorm", "post_attention_norm"},
      {"pre_feedforward_layernorm", "ffn_norm"}, {"mlp.gate_proj", "ffn_gate"},
      {"mlp.up_proj", "ffn_up"},                {"mlp.down_proj", "ffn_down"},
      {"post_feedforward_layernorm", "post_ffw_norm"}};
  std::vector<std::pair<std::string, std::string>> names = {
      {"model.embed_tokens.weight", "token_embd.weight"}, {"model.norm.weight", "output_norm.weight"}};
  const size_t n_layers = (ckpt.value()->size() - 2) / per_layer.size();
  for (size_t i = 0; i < n_layers; ++i) {
    for (const auto& [hf, gg_name] : per_layer) {
      names.emplace_back("model.layers." + std::to_string(i) + "." + hf + ".weight",
                         "blk." + std::to_string(i) + "." + gg_name + ".weight");
    }
  }
  ASSERT_EQ(names.size(), ckpt.value()->size());
  EXPECT_EQ(gg.value()->tensors().size(), names.size());  // no separate output head: tied
  for (const auto& [hf, gg_name] : names) {
    SCOPED_TRACE(hf);
    const TensorEntry* st = ckpt.value()->Find(hf);
    const gguf::TensorInfo* gt = gg.value()->FindTensor(gg_name);
    ASSERT_NE(st, nullptr);
    ASSERT_NE(gt, nullptr) << gg_name;
    ASSERT_EQ(st->dtype, DType::kBF16);
    ASSERT_EQ(gt->type, DType::kF32);
    const TensorView a = st->View(), b = gt->View();  // both engine order: [out, in]
    ASSERT_EQ(a.ndim, b.ndim);
    for (int d = 0; d < a.ndim; ++d) ASSERT_EQ(a.shape[d], b.shape[d]);
    const bool is_norm = hf.find("norm.weight") != std::string::npos;
    for (int64_t k = 0; k < a.numel(); ++k) {
      const float expected = Bf16ToF32(a.as<uint16_t>()[k]) + (is_norm ? 1.0f : 0.0f);
      ASSERT_EQ(b.as<float>()[k], expected) << "element " << k;
    }
  }
}

}  // namespace
}  // namespace uniprefill::safetensors
