// The `uniprefill` binary as a user runs it: a tiny model end to end, and bad input of every kind
// giving one clear `error:` line and a non-zero exit, never a crash.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_runner.h"
#include "core/device_context.h"
#include "testing/tiny_gemma3.h"
#include "eval/ruler_runner.h"
#include "server/openai_protocol.h"
#include "server/prometheus.h"
#include "uniprefill/batch_engine.h"
#include "uniprefill/engine.h"

namespace uniprefill {
namespace {

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tiny_ = new std::string(testing::WriteTempFile("cli_tiny.gguf", testing::BuildTinyGemma3()));
  }
  static void TearDownTestSuite() { delete tiny_; }
  static std::string Tiny() { return *tiny_; }
  static std::string* tiny_;
};
std::string* CliTest::tiny_ = nullptr;

TEST_F(CliTest, HelpDocumentsEveryRunFlag) {
  CliResult r = RunCli("run --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--model", "--prompt", "--prompt-file", "--chat", "--max-tokens",
                           "--temperature", "--seed", "--threads", "--ctx-size", "--top-k",
                           "--top-p"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
  EXPECT_EQ(RunCli("--help").exit_code, 0);
}

TEST_F(CliTest, RunsATinyModelAndPrintsTimings) {
  CliResult r = RunCli("run --model " + Tiny() + " --prompt 'the theme' --max-tokens 5 "
                       "--ignore-eos --threads 2 --json " + testing::TempPath("r.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("TTFT"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("prefill"), std::string::npos);
  EXPECT_NE(r.err.find("decode"), std::string::npos);
  const std::string json = ReadAll(testing::TempPath("r.json"));
  EXPECT_NE(json.find("\"generated_tokens\": 5"), std::string::npos) << json;
}

TEST_F(CliTest, SameSeedSameSampledText) {
  const std::string args = "run --model " + Tiny() +
                           " --prompt 'the' --max-tokens 8 --ignore-eos --temperature 1.5 "
                           "--seed 11 -q";
  CliResult a = RunCli(args), b = RunCli(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST_F(CliTest, MissingModelFile) {
  ExpectCleanError("run --model /nonexistent/model.gguf --prompt hi", "/nonexistent/model.gguf");
}

// Tensor parallelism needs its ranks: run alone, the flag is one clear error naming mpirun (the
// 2-rank runs are CTest mpi_run_tp2, tests/mpi/run_mpi_test.py).
TEST_F(CliTest, TensorParallelWithoutMpirunSaysHowToLaunch) {
  ExpectCleanError("run --model " + Tiny() + " --prompt hi --tensor-parallel 2",
                   "run it as `mpirun -np 2 uniprefill ...`");
  ExpectCleanError("run --model " + Tiny() + " --prompt hi --tensor-parallel 0",
                   "--tensor-parallel");
  // bench-prefill, eval and serve take the flag too (tests/mpi/), so alone they say the same.
  ExpectCleanError("bench-prefill --model " + Tiny() + " --random-tokens --lengths 64 "
                   "--tensor-parallel 2",
                   "run it as `mpirun -np 2 uniprefill ...`");
  ExpectCleanError("serve --model " + Tiny() + " --port 0 --tensor-parallel 2",
                   "run it as `mpirun -np 2 uniprefill ...`");
}

// What does not run tensor parallel yet says so before loading anything.
TEST_F(CliTest, TensorParallelRefusalNamesWhatIsMissing) {
  ExpectCleanError("eval ruler --model " + Tiny() + " --batch 2 --tensor-parallel 2",
                   "needs its followers on the other ranks");
}

TEST_F(CliTest, NotAGgufFile) {
  const std::string path = testing::WriteTempFile("not_gguf.gguf", {'h', 'e', 'l', 'l', 'o', '\n',
                                                                     'w', 'o', 'r', 'l', 'd', '!'});
  ExpectCleanError("run --model " + path + " --prompt hi", "not a GGUF file");
}

TEST_F(CliTest, TruncatedGguf) {
  std::vector<uint8_t> bytes = testing::BuildTinyGemma3();
  for (size_t keep : {size_t(3), size_t(40), size_t(5000), bytes.size() / 2, bytes.size() - 1}) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + keep);
    const std::string path = testing::WriteTempFile("truncated.gguf", cut);
    ExpectCleanError("run --model " + path + " --prompt hi", "GGUF");
  }
}

TEST_F(CliTest, UnsupportedArchitecture) {
  testing::TinyGemma3Options o;
  o.architecture = "rwkv7";
  const std::string path = testing::WriteTempFile("arch.gguf", testing::BuildTinyGemma3(o));
  ExpectCleanError("run --model " + path + " --prompt hi", "architecture 'rwkv7'");
}

TEST_F(CliTest, UnsupportedQuantType) {
  testing::TinyGemma3Options o;
  o.q2k_attn_q = true;
  const std::string path = testing::WriteTempFile("q2k.gguf", testing::BuildTinyGemma3(o));
  ExpectCleanError("run --model " + path + " --prompt hi", "Q2_K");
}

TEST_F(CliTest, PromptLongerThanContext) {
  ExpectCleanError("run --model " + Tiny() + " --ctx-size 16 --prompt '" + std::string(100, 'x') +
                       "'",
                   "context");
}

TEST_F(CliTest, ContextLargerThanModel) {
  ExpectCleanError("run --model " + Tiny() + " --ctx-size 100000 --prompt hi", "context");
}

TEST_F(CliTest, BadFlagValues) {
  const std::string m = "run --model " + Tiny() + " --prompt hi ";
  ExpectCleanError(m + "--max-tokens 0", "--max-tokens");
  ExpectCleanError(m + "--max-tokens abc", "--max-tokens");
  ExpectCleanError(m + "--temperature -1", "--temperature");
  ExpectCleanError(m + "--top-p 1.5", "--top-p");
  ExpectCleanError(m + "--threads -3", "--threads");
  ExpectCleanError(m + "--no-such-flag", "no-such-flag");
  ExpectCleanError("run --model " + Tiny() + " --prompt-file /nonexistent/prompt.txt",
                   "/nonexistent/prompt.txt");
  ExpectCleanError("run --model " + Tiny(), "no prompt");
  ExpectCleanError("frobnicate", "frobnicate");
}

// --device cuda: runs on the GPU where there is one; elsewhere one clear error line, non-zero exit.
TEST_F(CliTest, DeviceCudaRunsOnTheGpuOrSaysWhy) {
  CliResult r = RunCli("run --model " + Tiny() +
                       " --prompt 'the theme' --max-tokens 4 --ignore-eos --device cuda");
  std::string why;
  if (DeviceContext::CudaAvailable(&why)) {
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("cuda:0"), std::string::npos) << r.err;
  } else {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("error:"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("CUDA"), std::string::npos) << r.err;
  }
  ExpectCleanError("run --model " + Tiny() + " --prompt hi --device gpu", "--device");
}

// --gpu-attention: auto, ours, cudnn or flash, and cudnn only with --device cuda (one clear error
// otherwise); the others mean nothing on the CPU and are accepted there.
TEST_F(CliTest, GpuAttentionIsCheckedAndNeedsTheGpu) {
  ExpectCleanError("run --model " + Tiny() + " --prompt hi --gpu-attention bogus", "--gpu-attention");
  ExpectCleanError("run --model " + Tiny() + " --prompt hi --gpu-attention cudnn", "device cuda");
  for (const char* kernel : {"ours", "auto", "flash"}) {
    CliResult r = RunCli("run --model " + Tiny() + " --prompt hi --max-tokens 2 --gpu-attention " +
                         kernel);
    EXPECT_EQ(r.exit_code, 0) << kernel << ": " << r.err;
  }
}

TEST_F(CliTest, BadPromptTokensFile) {
  const std::string bad = testing::TempPath("bad_ids.json");
  std::ofstream(bad) << "[1, 2, \"x\"]";
  ExpectCleanError("run --model " + Tiny() + " --prompt-tokens-file " + bad, "non-integer");
  std::ofstream(bad) << "[2, 5000]";
  ExpectCleanError("run --model " + Tiny() + " --prompt-tokens-file " + bad, "5000");
  std::ofstream(bad) << "{not json";
  ExpectCleanError("run --model " + Tiny() + " --prompt-tokens-file " + bad, "JSON array");
}

TEST_F(CliTest, InfoOnMissingFile) {
  ExpectCleanError("info --model /nonexistent/x.gguf", "/nonexistent/x.gguf");
}

}  // namespace
}  // namespace uniprefill

namespace uniprefill {
namespace {

class CliUniPrefillTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::TinyGemma3Options o;
    o.layers = 12;  // full attention at 5 and 11
    model_ = new std::string(testing::WriteTempFile("cli_tiny12.gguf", testing::BuildTinyGemma3(o)));
    ids_ = new std::string(testing::TempPath("cli_ids.json"));
    std::ofstream out(*ids_);
    out << "[2";
    for (int i = 1; i < 600; ++i) out << ", " << (4 + (i * 97) % 250);
    out << "]";
  }
  static void TearDownTestSuite() {
    delete model_;
    delete ids_;
  }
  static std::string Run(const std::string& flags) {
    return "run --model " + *model_ + " --prompt-tokens-file " + *ids_ +
           " --max-tokens 3 --ignore-eos -q " + flags;
  }
  // The engine itself on the tiny model, with what the tests' flags ask for (--drop-layers 5,11
  // --uniprefill-mode fixed-ratio --keep-ratio 0.5): what the commands must report.
  static Result<std::unique_ptr<Engine>> LoadEngineWithTheFlags() {
    EngineOptions o;
    o.model_path = *model_;
    o.threads = 2;
    o.uniprefill.drop_layers = std::vector<int>{5, 11};
    o.uniprefill.mode = SelectionMode::kFixedRatio;
    o.uniprefill.keep_ratio = 0.5f;
    return Engine::Load(o);
  }
  static std::string* model_;
  static std::string* ids_;
};
std::string* CliUniPrefillTest::model_ = nullptr;
std::string* CliUniPrefillTest::ids_ = nullptr;

// The fewest and most tokens a fixed-ratio drop keeps of `alive` (G 64, S 128, n 128, the model
// defaults): floor(ratio * blocks) blocks (at least one) chosen by score, plus the first S and the
// last n tokens. Which blocks win depends on the weights; how many tokens each block adds outside
// the sink and window does not, so the bounds take the blocks that add least and most.
std::pair<int, int> FixedRatioKeptBounds(int alive, double ratio) {
  constexpr int kG = 64, kS = 128, kN = 128;
  if (alive <= kS + kN) return {alive, alive};
  const int blocks = (alive + kG - 1) / kG;
  const int chosen = std::clamp(static_cast<int>(std::floor(ratio * blocks + 1e-9)), 1, blocks);
  std::vector<int> extra;
  for (int b = 0; b < blocks; ++b) {
    int n = 0;
    for (int i = b * kG; i < std::min(alive, (b + 1) * kG); ++i) n += i >= kS && i < alive - kN;
    extra.push_back(n);
  }
  std::sort(extra.begin(), extra.end());
  const int always = kS + kN;
  return {always + std::accumulate(extra.begin(), extra.begin() + chosen, 0),
          always + std::accumulate(extra.end() - chosen, extra.end(), 0)};
}

TEST_F(CliUniPrefillTest, PrintsKeptTokensPerDropLayer) {
  const std::string json = testing::TempPath("up.json");
  CliResult r = RunCli(Run("--drop-layers 5,11 --uniprefill-mode fixed-ratio --keep-ratio 0.5 "
                           "--json " + json));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The engine itself, on the same tokens and settings, is what the command must report.
  Result<std::unique_ptr<Engine>> engine = LoadEngineWithTheFlags();
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  const nlohmann::json ids = nlohmann::json::parse(ReadAll(*ids_));
  SamplingParams greedy;
  greedy.max_tokens = 3;
  greedy.ignore_eos = true;
  Result<GenerationResult> want = (*engine)->Generate(ids.get<std::vector<int32_t>>(), greedy);
  ASSERT_TRUE(want.ok()) << want.status().message();
  ASSERT_EQ(want->kept.size(), 2u);

  const nlohmann::json j = nlohmann::json::parse(ReadAll(json));
  ASSERT_EQ(j["uniprefill"].size(), 2u) << j.dump();
  int alive = 600;  // the first drop layer sees the whole prompt; selections nest
  for (int d = 0; d < 2; ++d) {
    const nlohmann::json& got = j["uniprefill"][d];
    const KeptTokensInfo& ref = want->kept[d];
    SCOPED_TRACE("drop layer " + std::to_string(ref.layer));
    EXPECT_EQ(got["layer"], d == 0 ? 5 : 11);
    EXPECT_EQ(got["layer"], ref.layer);
    EXPECT_EQ(got["alive"], alive);
    EXPECT_EQ(got["kept"], ref.kept);
    EXPECT_EQ(ref.alive, alive);
    // 600 tokens = 10 blocks: 5 chosen blocks plus the sink and window tokens; at layer 11 half
    // the survivors' blocks again.
    const auto [lo, hi] = FixedRatioKeptBounds(alive, 0.5);
    EXPECT_GE(ref.kept, lo);
    EXPECT_LE(ref.kept, hi);
    const std::string line = "uniprefill: request 0 layer " + std::to_string(ref.layer) + " kept " +
                             std::to_string(ref.kept) + "/" + std::to_string(alive) + " tokens\n";
    EXPECT_NE(r.err.find(line), std::string::npos)
        << "want the line '" << line << "' in\n" << r.err;
    alive = ref.kept;
  }
}

// "keep_ratio" has one meaning wherever it is reported (KeepRatio, uniprefill/engine.h): the
// tokens the last drop layer kept over the tokens the prefill started with. One request, two drop
// layers (so the last layer's kept / alive would differ): the CLI's JSON, the engine, the RULER
// runner (eval, calibrate), the HTTP response body, /metrics and bench-prefill agree.
TEST_F(CliUniPrefillTest, KeepRatioMeansTheSameEverywhere) {
  const std::string flags = "--drop-layers 5,11 --uniprefill-mode fixed-ratio --keep-ratio 0.5 ";
  const std::string json = testing::TempPath("keep_ratio.json");
  CliResult r = RunCli(Run(flags + "--json " + json));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double run_json = nlohmann::json::parse(ReadAll(json))["keep_ratio"].get<double>();

  Result<std::unique_ptr<Engine>> engine = LoadEngineWithTheFlags();
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  const std::vector<int32_t> ids =
      nlohmann::json::parse(ReadAll(*ids_)).get<std::vector<int32_t>>();
  SamplingParams greedy;
  greedy.max_tokens = 3;
  greedy.ignore_eos = true;
  Result<GenerationResult> gen = (*engine)->Generate(ids, greedy);
  ASSERT_TRUE(gen.ok()) << gen.status().message();
  ASSERT_EQ(gen->kept.size(), 2u);
  const double by_hand = double(gen->kept[1].kept) / 600;
  EXPECT_NE(by_hand, double(gen->kept[1].kept) / gen->kept[1].alive);  // the meanings differ here
  EXPECT_DOUBLE_EQ(KeepRatio(gen->kept), by_hand);
  EXPECT_DOUBLE_EQ(run_json, by_hand);

  eval::RulerCase c;
  c.ids = ids;
  c.sample.max_new_tokens = 3;
  Result<eval::RulerOutcome> ruler =
      eval::RunRulerCase(**engine, c, /*uniprefill=*/true, std::nullopt);
  ASSERT_TRUE(ruler.ok()) << ruler.status().message();
  EXPECT_DOUBLE_EQ(ruler->keep_ratio, by_hand);

  Result<std::unique_ptr<BatchEngine>> batch = BatchEngine::Start(**engine, ServingOptions{});
  ASSERT_TRUE(batch.ok()) << batch.status().message();
  std::mutex mu;
  std::condition_variable cv;
  std::optional<RequestUsage> usage;
  ASSERT_TRUE((*batch)->Submit(ids, greedy, [&](const RequestUpdate& u) {
    if (!u.finished) return;
    std::lock_guard<std::mutex> lock(mu);
    usage = u.usage;
    cv.notify_all();
  }).ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return usage.has_value(); }));
  }
  EXPECT_DOUBLE_EQ(server::UniPrefillJson(usage->kept)["keep_ratio"].get<double>(), by_hand);
  const std::string metrics = server::FormatPrometheus((*batch)->Metrics(), "tiny");
  const size_t at = metrics.find("\nuniprefill_keep_ratio{");  // the sample line (with labels)
  ASSERT_NE(at, std::string::npos) << metrics;
  const size_t value = metrics.find("} ", at);
  ASSERT_NE(value, std::string::npos) << metrics;
  EXPECT_NEAR(std::stod(metrics.substr(value + 2)), by_hand, 1e-12);

  // bench-prefill draws its own prompt: its keep_ratio must be KeepRatio of its own records.
  const std::string bench_json = testing::TempPath("keep_ratio_bench.json");
  CliResult b = RunCli("bench-prefill --model " + *model_ + " --random-tokens --lengths 600 " +
                       "--repeats 1 --threads 2 " + flags + "--json " + bench_json);
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const nlohmann::json row = nlohmann::json::parse(ReadAll(bench_json))["runs"][0];
  std::vector<KeptTokensInfo> bench_kept;
  for (const nlohmann::json& k : row["kept"]) {
    bench_kept.push_back({k["layer"].get<int>(), k["kept"].get<int>(), k["alive"].get<int>()});
  }
  ASSERT_EQ(bench_kept.size(), 2u) << row.dump();
  EXPECT_DOUBLE_EQ(row["keep_ratio"].get<double>(), KeepRatio(bench_kept));
  EXPECT_DOUBLE_EQ(row["keep_ratio"].get<double>(), double(bench_kept[1].kept) / 600);
}

TEST_F(CliUniPrefillTest, OffMeansNoSelection) {
  CliResult r = RunCli(Run("--uniprefill off"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("kept"), std::string::npos) << r.err;
}

TEST_F(CliUniPrefillTest, ModelDefaultsAreShown) {
  CliResult r = RunCli("run --model " + *model_ + " --prompt-tokens-file " + *ids_ +
                       " --max-tokens 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 12 layers: the rule picks full-attention layers in [L/4 - 1, 0.85 L) = [2, 10.2): layer 5.
  EXPECT_NE(r.err.find("uniprefill: on, drop layers 5, top-p 0.975"), std::string::npos) << r.err;
}

TEST_F(CliUniPrefillTest, HelpListsEveryUniPrefillFlag) {
  CliResult r = RunCli("run --help");
  for (const char* flag : {"--uniprefill", "--drop-layers", "--uniprefill-p", "--uniprefill-mode",
                           "--keep-ratio", "--block-size", "--sink", "--last-n", "--window-mode"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST_F(CliUniPrefillTest, BadValuesAreCleanErrors) {
  ExpectCleanError(Run("--drop-layers 3"), "not a full-attention layer");
  ExpectCleanError(Run("--drop-layers 5,x"), "'x'");
  ExpectCleanError(Run("--drop-layers 99"), "outside the model");
  ExpectCleanError(Run("--drop-layers 11,5"), "ascending");
  ExpectCleanError(Run("--uniprefill-p 0"), "p must be in (0, 1]");
  ExpectCleanError(Run("--uniprefill-p 1.5"), "p must be in (0, 1]");
  ExpectCleanError(Run("--keep-ratio 0"), "keep ratio");
  ExpectCleanError(Run("--block-size 0"), "block size");
  ExpectCleanError(Run("--last-n 0"), "last-n");
  ExpectCleanError(Run("--uniprefill maybe"), "--uniprefill");
  ExpectCleanError(Run("--uniprefill-mode best"), "--uniprefill-mode");
  // The flags are checked by the config files' and the HTTP extension's readers.
  ExpectCleanError(Run("--keep-ratio 2"), "--keep-ratio: UniPrefill option 'keep_ratio'");
  ExpectCleanError(Run("--block-size 0"), "--block-size: UniPrefill option 'block_size'");
  ExpectCleanError(Run("--sink 1.5"), "--sink: expected an integer");
}

TEST_F(CliUniPrefillTest, RunsHuggingFaceCheckpointsFromTokenIds) {
  for (const char* family : {"llama", "qwen3_next", "gemma3"}) {
    const std::string dir = std::string(UP_SOURCE_DIR) + "/tests/goldens/hf_tiny/" + family;
    const std::string ids = testing::TempPath("hf_ids.json");
    std::ofstream(ids) << "[1, 5, 9, 14, 20, 33, 41]";
    CliResult r = RunCli("run --model " + dir + " --prompt-tokens-file " + ids +
                         " --max-tokens 4 --ignore-eos --json " + testing::TempPath("hf.json"));
    ASSERT_EQ(r.exit_code, 0) << family << ": " << r.err;
    EXPECT_NE(ReadAll(testing::TempPath("hf.json")).find("\"generated_tokens\": 4"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace uniprefill

namespace uniprefill {
namespace {

class CliEvalFidelityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::TinyGemma3Options o;
    o.layers = 12;
    model_ = new std::string(
        testing::WriteTempFile("cli_fid_tiny12.gguf", testing::BuildTinyGemma3(o)));
  }
  static void TearDownTestSuite() { delete model_; }
  static std::string* model_;
};
std::string* CliEvalFidelityTest::model_ = nullptr;

TEST_F(CliEvalFidelityTest, POneIsIdenticalToDense) {
  const std::string out = testing::TempPath("fid.json");
  CliResult r = RunCli("eval fidelity --model " + *model_ +
                       " --lengths 400 --samples 2 --greedy-tokens 6 --drop-layers 5,11 "
                       "--uniprefill-p 1.0 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(ReadAll(out));
  EXPECT_EQ(j["prompts"].size(), 2u);
  EXPECT_EQ(j["mean_kl"].get<double>(), 0.0);
  EXPECT_EQ(j["mean_top1_agreement"].get<double>(), 1.0);
  EXPECT_EQ(j["mean_greedy_prefix_agreement"].get<double>(), 1.0);
}

TEST_F(CliEvalFidelityTest, DroppingTokensIsMeasured) {
  const std::string out = testing::TempPath("fid2.json");
  CliResult r = RunCli("eval fidelity --model " + *model_ +
                       " --lengths 400,600 --samples 1 --greedy-tokens 4 --drop-layers 5,11 "
                       "--keep-ratio 0.3 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(ReadAll(out));
  ASSERT_EQ(j["prompts"].size(), 2u);
  for (const auto& p : j["prompts"]) {
    EXPECT_GT(p["kl"].get<double>(), 0.0);  // random weights: dropping 70% of blocks shows
    ASSERT_EQ(p["kept"].size(), 2u);
    EXPECT_LT(p["kept"][0]["kept"].get<int>(), p["tokens"].get<int>());
  }
}

TEST_F(CliEvalFidelityTest, BadInputIsACleanError) {
  ExpectCleanError("eval fidelity --model " + *model_ + " --lengths x", "--lengths");
  ExpectCleanError("eval fidelity --model " + *model_ + " -f /nonexistent/t.txt", "/nonexistent/t.txt");
  ExpectCleanError("eval fidelity --model " + *model_ + " --lengths 5000", "context");
  ExpectCleanError("eval", "subcommand");
}

}  // namespace
}  // namespace uniprefill

namespace uniprefill {
namespace {

// The sampling and stop flags of `run` (the CliTest fixture above: the 6-layer tiny model).
TEST_F(CliTest, HelpDocumentsTheSamplingAndStopFlags) {
  CliResult r = RunCli("run --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--min-p", "--repeat-penalty", "--repeat-last-n", "--presence-penalty",
                           "--frequency-penalty", "--stop", "--stop-token-id", "--ignore-eos"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST_F(CliTest, StopStringCutsThePrintedText) {
  const std::string base = "run --model " + Tiny() + " --prompt 'the theme' --max-tokens 16 "
                           "--ignore-eos -q --threads 2 ";
  CliResult full = RunCli(base);
  ASSERT_EQ(full.exit_code, 0) << full.err;
  ASSERT_TRUE(full.out.ends_with("\n"));
  const std::string text = full.out.substr(0, full.out.size() - 1);  // run adds one newline
  ASSERT_GE(text.size(), 6u) << text;
  // Two bytes from the middle of the output, passed through the environment so that any byte
  // survives the shell; generation must end before their first occurrence.
  const std::string stop = text.substr(text.size() / 2, 2);
  ASSERT_EQ(stop.find('\0'), std::string::npos);
  setenv("UP_TEST_STOP", stop.c_str(), 1);
  const std::string json = testing::TempPath("stop.json");
  CliResult cut = RunCli(base + "--stop \"never here\" --stop=\"$UP_TEST_STOP\" --json " + json);
  unsetenv("UP_TEST_STOP");
  ASSERT_EQ(cut.exit_code, 0) << cut.err;
  EXPECT_EQ(cut.out, text.substr(0, text.find(stop)) + "\n");
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json));
  EXPECT_EQ(j["finish_reason"], "stop");
  EXPECT_LT(j["generated_tokens"].get<int>(), 16);
}

TEST_F(CliTest, StopTokenIdEndsBeforeTheToken) {
  const std::string base = "run --model " + Tiny() + " --prompt 'the theme' --max-tokens 4 "
                           "--ignore-eos -q --threads 2 --json ";
  const std::string json = testing::TempPath("stop_id.json");
  ASSERT_EQ(RunCli(base + json).exit_code, 0);
  const int first = nlohmann::json::parse(ReadAll(json))["tokens"][0].get<int>();
  CliResult r = RunCli(base + json + " --stop-token-id " + std::to_string(first));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json));
  EXPECT_EQ(j["finish_reason"], "stop");
  EXPECT_EQ(j["generated_tokens"].get<int>(), 0);
  EXPECT_EQ(r.out, "\n");
}

TEST_F(CliTest, BadSamplingAndStopFlagsAreCleanErrors) {
  const std::string m = "run --model " + Tiny() + " --prompt hi ";
  ExpectCleanError(m + "--min-p 2", "--min-p");
  ExpectCleanError(m + "--min-p nan", "--min-p");
  ExpectCleanError(m + "--temperature 3", "--temperature");
  ExpectCleanError(m + "--top-p 0", "--top-p");
  ExpectCleanError(m + "--repeat-penalty 0", "--repeat-penalty");
  ExpectCleanError(m + "--repeat-last-n -2", "--repeat-last-n");
  ExpectCleanError(m + "--presence-penalty 2.5", "--presence-penalty");
  ExpectCleanError(m + "--frequency-penalty -3", "--frequency-penalty");
  ExpectCleanError(m + "--stop-token-id 999999", "--stop-token-id");
  ExpectCleanError(m + "--stop-token-id -1", "--stop-token-id");
  ExpectCleanError(m + "--stop ''", "--stop");
  ExpectCleanError(m + "--stop a --stop b --stop c --stop d --stop e", "--stop");
}

}  // namespace
}  // namespace uniprefill
