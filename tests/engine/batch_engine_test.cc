// BatchEngine on the tiny random-weight Gemma 3 (12 layers, full attention at 5 and 11, UniPrefill
// dropping at layer 5 with small blocks so ~100-token prompts drop): requests alone and together
// give Engine::Generate's tokens, every request of a burst larger than the KV memory completes,
// preempted requests (recomputed) produce what they produce alone (dense, greedy or seeded) or what
// a prefill of their prompt and output so far produces (UniPrefill), cancel frees KV, bad requests
// are refused before any work.
#include "uniprefill/batch_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing/compare.h"
#include "testing/tiny_gemma3.h"
#include "uniprefill/engine.h"

namespace uniprefill {
namespace {

// Collects one request's updates; Wait() returns once the final update arrived.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<RequestUpdate> updates;
  bool done = false;

  UpdateCallback Callback() {
    return [this](const RequestUpdate& u) {
      std::lock_guard<std::mutex> lock(mu);
      updates.push_back(u);
      if (u.finished) {
        done = true;
        cv.notify_all();
      }
    };
  }
  bool Wait(int seconds = 120) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(seconds), [&] { return done; });
  }
  std::vector<int32_t> Tokens() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<int32_t> t;
    for (const RequestUpdate& u : updates) {
      for (const SampledToken& s : u.tokens) t.push_back(s.id);
    }
    return t;
  }
  std::string Text() {
    std::lock_guard<std::mutex> lock(mu);
    std::string t;
    for (const RequestUpdate& u : updates) t += u.text;
    return t;
  }
  RequestUpdate Final() {
    std::lock_guard<std::mutex> lock(mu);
    return updates.back();
  }
  // Every output token with its logprobs, in order.
  std::vector<SampledToken> Sampled() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<SampledToken> t;
    for (const RequestUpdate& u : updates) t.insert(t.end(), u.tokens.begin(), u.tokens.end());
    return t;
  }
  // The number of output tokens the request had when it was preempted, once per preemption: an
  // update carries the usage at the step that sampled its tokens, so the first token sampled after
  // the recompute is the first one whose update counts the preemption.
  std::vector<int> TokensAtPreemptions() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<int> at;
    int tokens = 0;
    for (const RequestUpdate& u : updates) {
      while (static_cast<int>(at.size()) < u.usage.preemptions) at.push_back(tokens);
      tokens += static_cast<int>(u.tokens.size());
    }
    return at;
  }
};

std::vector<int32_t> Ids(const std::vector<SampledToken>& tokens) {
  std::vector<int32_t> ids;
  for (const SampledToken& t : tokens) ids.push_back(t.id);
  return ids;
}

class BatchEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::TinyGemma3Options tiny;
    tiny.layers = 12;
    EngineOptions o;
    o.model_path = testing::WriteTempFile("batch_engine_tiny.gguf", testing::BuildTinyGemma3(tiny));
    o.threads = 2;
    o.f32_decode = true;  // one-row and many-row matmuls then share f32 arithmetic
    // f32 keys and values: batched and alone runs sum in different orders, and an f16 cache
    // would round a last-bit difference of a key into a 1e-3 one (logprobs then differ by
    // ~1e-4, measured); the pool sizes below count 4-byte elements too.
    o.kv_cache_dtype = "f32";
    o.uniprefill.drop_layers = std::vector<int>{5};
    o.uniprefill.mode = SelectionMode::kFixedRatio;
    o.uniprefill.keep_ratio = 0.5f;
    o.uniprefill.block_size = 8;
    o.uniprefill.sink = 8;
    o.uniprefill.last_n = 8;
    auto engine = Engine::Load(o);
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    engine_ = engine->release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }

  static SamplingParams Greedy(int max_tokens) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.logprobs = 1;
    return p;
  }

  static std::vector<int32_t> Prompt(int n, int salt) {
    std::string text;
    while (static_cast<int>(text.size()) < n) text += "abc def " + std::to_string(salt * 7 + text.size());
    text.resize(n);
    return engine_->Tokenize(text, /*add_bos=*/true);
  }

  static std::unique_ptr<BatchEngine> Start(ServingOptions o = {}) {
    auto b = BatchEngine::Start(*engine_, o);
    EXPECT_TRUE(b.ok()) << b.status().message();
    return b.ok() ? std::move(*b) : nullptr;
  }

  // One request of a preemption test.
  struct Request {
    std::vector<int32_t> prompt;
    SamplingParams params;
  };

  static constexpr int kBurstOutputTokens = 48;  // PreemptingPool() is sized for it

  // The preemption tests' burst: 8 requests of 29 prompt tokens (each its own) and `params`, with 4
  // logprob alternatives (the near-tie rule needs two, the logprob check compares them all) and a
  // strong repetition penalty: without it the tiny random model repeats one token, and a recompute
  // that fed the wrong generated tokens would feed the right ones by luck.
  static std::vector<Request> Burst(const SamplingParams& params) {
    std::vector<Request> r;
    for (int i = 0; i < 8; ++i) {
      r.push_back({Prompt(20, 200 + i), params});
      r.back().params.logprobs = 4;
      r.back().params.repetition_penalty = 4.0f;
    }
    return r;
  }

  // A pool that admits the burst's prefills but cannot hold the decodes that follow: 200 blocks of
  // 8 tokens (220 stopped preempting at budgets 5-7 once segment-wise chunks were priced by their
  // segment's layers: the schedule, not the premise, changed). A prefill is admitted when its dense reservation is free (4 pages of each of the 12
  // layers: 48 blocks) and after its step holds 28 (its full-attention pages and the sliding
  // layers' last two pages, window 8), so about seven requests get in; at their last token (76)
  // each holds 30-40 blocks, ~250 for seven: decodes run out of blocks and running requests are
  // preempted (3-4 times here, at least once even with the submissions spread over steps).
  static ServingOptions PreemptingPool() {
    ServingOptions o;
    o.kv_block_tokens = 8;
    o.kv_cache_memory = int64_t{200} * 8 * 1024;  // K+V of one token of one layer: 1 KiB
    return o;
  }

  // Every request alone, one after another, in the default pool (room for all of them, nothing
  // preempted): each one's reference.
  static std::vector<std::vector<SampledToken>> RunAlone(const std::vector<Request>& requests) {
    auto batch = Start();
    std::vector<std::vector<SampledToken>> out;
    for (const Request& r : requests) {
      Collector c;
      EXPECT_TRUE(batch->Submit(r.prompt, r.params, c.Callback()).ok());
      EXPECT_TRUE(c.Wait());
      out.push_back(c.Sampled());
    }
    EXPECT_EQ(batch->Metrics().preemptions, 0);
    return out;
  }

  // Each prompt alone with its prefill whole (no chunked prefill): the chunked tests' reference,
  // every output token with its logprobs and the final usage's UniPrefill record.
  struct WholeOutput {
    std::vector<SampledToken> sampled;
    std::vector<KeptTokensInfo> kept;
  };
  static std::vector<WholeOutput> RunEachWhole(const std::vector<std::vector<int32_t>>& prompts,
                                               const SamplingParams& p) {
    ServingOptions whole;
    whole.chunked_prefill = false;
    auto batch = Start(whole);
    std::vector<WholeOutput> out;
    for (const std::vector<int32_t>& prompt : prompts) {
      Collector c;
      EXPECT_TRUE(batch->Submit(prompt, p, c.Callback()).ok());
      const bool done = c.Wait();
      EXPECT_TRUE(done) << "a whole-prefill reference never finished";
      out.push_back(done ? WholeOutput{c.Sampled(), c.Final().usage.kept} : WholeOutput{});
    }
    return out;
  }

  // Every request at once into PreemptingPool(); `c` (one collector per request) receives what
  // each produced. Returns the metrics once all have finished.
  static ServingMetrics RunPreempting(const std::vector<Request>& requests,
                                      std::vector<Collector>& c, int max_batched_tokens = 8192) {
    ServingOptions o = PreemptingPool();
    o.max_batched_tokens = max_batched_tokens;
    auto batch = Start(o);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_TRUE(
          batch->Submit(requests[i].prompt, requests[i].params, c[i].Callback()).ok());
    }
    int preempted = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_TRUE(c[i].Wait()) << "request " << i << " never finished";
      EXPECT_EQ(c[i].Final().finish_reason, "length") << "request " << i;
      preempted += c[i].Final().usage.preemptions > 0;
      const std::vector<int32_t> tokens = c[i].Tokens();
      EXPECT_GT(std::set<int32_t>(tokens.begin(), tokens.end()).size(), 24u)
          << "request " << i << " repeats itself: its recompute would not depend on its tokens";
    }
    const ServingMetrics m = batch->Metrics();
    EXPECT_GT(m.preemptions, 0) << "the pool held every request: nothing was recomputed";
    EXPECT_GT(preempted, 0) << "no request reports a preemption";
    EXPECT_EQ(m.kv_blocks_used, 0);
    RecordProperty("preemptions", std::to_string(m.preemptions));
    return m;
  }

  static Engine* engine_;
};
Engine* BatchEngineTest::engine_ = nullptr;

// Tokens equal, or they part where the reference's top-2 logprobs are within 1e-3 (a near-tie
// that a different summation order may flip).
void ExpectSameOrNearTie(const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                         const std::vector<SampledToken>& want_logprobs, const std::string& what) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  if (i == got.size() && i == want.size()) return;
  ASSERT_LT(i, want_logprobs.size()) << what << ": lengths differ " << got.size() << " vs "
                                     << want.size();
  const SampledToken& t = want_logprobs[i];
  ASSERT_GE(t.top.size(), 2u) << what;
  EXPECT_LT(t.top[0].logprob - t.top[1].logprob, 1e-3f)
      << what << ": tokens part at " << i << " without a near-tie";
}

// Up to where the tokens part, each token's logprob and its alternatives' (rank by rank) equal the
// reference's within 1e-4 (a recompute and the decodes it replaces differ by a few 1e-6). The tiny
// random model often repeats one token whatever its context holds, so a request that resumed over
// a wrong cache can keep its tokens; it does not keep its logits.
void ExpectSameLogprobs(const std::vector<SampledToken>& got, const std::vector<SampledToken>& want,
                        const std::string& what) {
  for (size_t i = 0; i < got.size() && i < want.size() && got[i].id == want[i].id; ++i) {
    ASSERT_EQ(got[i].top.size(), want[i].top.size()) << what;
    std::vector<float> g = {got[i].logprob}, w = {want[i].logprob};
    for (size_t k = 0; k < got[i].top.size(); ++k) {
      g.push_back(got[i].top[k].logprob);
      w.push_back(want[i].top[k].logprob);
    }
    const double diff = testing::MaxAbsDiff(g, w);  // infinite if any logprob is NaN
    if (!(diff <= 1e-4)) {
      ADD_FAILURE() << what << ": the logprobs of output token " << i << " differ by " << diff;
      return;
    }
  }
}

// ExpectSameOrNearTie on the ids, then ExpectSameLogprobs.
void ExpectSameOutput(const std::vector<SampledToken>& got, const std::vector<SampledToken>& want,
                      const std::string& what) {
  ExpectSameOrNearTie(Ids(got), Ids(want), want, what);
  ExpectSameLogprobs(got, want, what);
}

TEST_F(BatchEngineTest, OneRequestEqualsEngineGenerate) {
  auto batch = Start();
  for (bool uniprefill : {true, false}) {
    SCOPED_TRACE(uniprefill ? "uniprefill" : "dense");
    const std::vector<int32_t> prompt = Prompt(120, 1);
    SamplingParams p = Greedy(12);
    p.uniprefill = uniprefill;
    Result<GenerationResult> want = engine_->Generate(prompt, p);
    ASSERT_TRUE(want.ok()) << want.status().message();
    Collector c;
    ASSERT_TRUE(batch->Submit(prompt, p, c.Callback()).ok());
    ASSERT_TRUE(c.Wait());
    EXPECT_EQ(c.Tokens(), want->tokens);
    EXPECT_EQ(c.Text(), want->text);
    const RequestUpdate f = c.Final();
    EXPECT_EQ(f.finish_reason, "length");
    EXPECT_EQ(f.usage.completion_tokens, 12);
    EXPECT_EQ(f.usage.prompt_tokens, static_cast<int>(prompt.size()));
    ASSERT_EQ(f.usage.kept.size(), want->kept.size());
    if (uniprefill) {
      ASSERT_EQ(f.usage.kept.size(), 1u);
      EXPECT_LT(f.usage.kept[0].kept, f.usage.kept[0].alive);  // it really dropped
      EXPECT_EQ(f.usage.kept[0].kept, want->kept[0].kept);
    }
  }
  const ServingMetrics m = batch->Metrics();
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.running, 0);
}

// --prefill-only-tokens reaches the scheduler: a dense prompt of 257 to 512 tokens alone (no
// decodes beside it) runs in chunks of the 256-row prefill-only budget, not the 64-row step
// budget, so its prefill takes 2 steps and each of its 2 more tokens one. (The engine once passed
// the value into another field and every server ran the step budget.)
TEST_F(BatchEngineTest, APromptWithNoDecodesBesideItSpendsThePrefillOnlyBudget) {
  ServingOptions o;
  o.max_batched_tokens = 64;
  o.prefill_only_tokens = 256;
  o.budget_counts_attention = false;  // rows only: exact chunk counts
  auto batch = Start(o);
  SamplingParams p = Greedy(3);
  p.uniprefill = false;
  std::vector<int32_t> prompt = Prompt(2000, 5);
  ASSERT_GT(prompt.size(), 256u);
  prompt.resize(std::min<size_t>(prompt.size(), 400));
  Collector c;
  ASSERT_TRUE(batch->Submit(prompt, p, c.Callback()).ok());
  ASSERT_TRUE(c.Wait());
  EXPECT_EQ(c.Tokens().size(), 3u);
  EXPECT_EQ(batch->Metrics().steps, 2 + 2);
}

// ServingOptions::attention_slowdown reaches the scheduler's prices: a dense prompt alone, its
// chunks charged for the keys they attend, takes more steps where an attention FLOP is priced at
// 50 linear ones than by FLOPs (the tiny model's 400th key costs ~0.06 of a row by FLOPs, ~3 at
// 50x), and gives the same tokens; the gauge says what it served with. Out of (0, 100] the
// start is refused naming the option.
TEST_F(BatchEngineTest, TheAttentionSlowdownPricesDeepChunksSmaller) {
  SamplingParams p = Greedy(2);
  p.uniprefill = false;
  std::vector<int32_t> prompt = Prompt(2000, 9);
  prompt.resize(std::min<size_t>(prompt.size(), 400));
  std::vector<int64_t> steps;
  std::vector<std::vector<int32_t>> tokens;
  for (double slowdown : {1.0, 50.0}) {
    SCOPED_TRACE(slowdown);
    ServingOptions o;
    o.max_batched_tokens = 64;
    o.attention_slowdown = slowdown;
    auto batch = Start(o);
    ASSERT_NE(batch, nullptr);
    Collector c;
    ASSERT_TRUE(batch->Submit(prompt, p, c.Callback()).ok());
    ASSERT_TRUE(c.Wait());
    EXPECT_DOUBLE_EQ(batch->Metrics().attention_slowdown, slowdown);
    steps.push_back(batch->Metrics().steps);
    tokens.push_back(c.Tokens());
  }
  EXPECT_EQ(tokens[0], tokens[1]);
  // By FLOPs: 400 rows in chunks of ~60 (7 steps) and a decode step; at 50x the deep chunks
  // shrink to ~16 rows.
  EXPECT_LE(steps[0], 9);
  EXPECT_GT(steps[1], steps[0] + 4);
  for (double bad : {0.0, -1.0, 101.0, std::nan("")}) {
    ServingOptions o;
    o.attention_slowdown = bad;
    auto b = BatchEngine::Start(*engine_, o);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(b.status().message().find("attention slowdown"), std::string::npos)
        << b.status().message();
  }
}

TEST_F(BatchEngineTest, ConcurrentRequestsGiveTheirAloneTokensAndShareSteps) {
  // Reference: each request alone through the batch engine.
  const int n = 8;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) prompts.push_back(Prompt(20 + 37 * i, i));
  std::vector<std::vector<int32_t>> alone(n);
  std::vector<std::vector<SampledToken>> alone_lp(n);
  {
    auto batch = Start();
    for (int i = 0; i < n; ++i) {
      Collector c;
      ASSERT_TRUE(batch->Submit(prompts[i], Greedy(10), c.Callback()).ok());
      ASSERT_TRUE(c.Wait());
      alone[i] = c.Tokens();
      for (const RequestUpdate& u : c.updates) {
        alone_lp[i].insert(alone_lp[i].end(), u.tokens.begin(), u.tokens.end());
      }
    }
  }
  ServingOptions o;
  o.max_batched_tokens = 256;  // several prefills per step, next to running decodes
  auto batch = Start(o);
  std::vector<Collector> c(n);
  for (int i = 0; i < n; ++i) ASSERT_TRUE(batch->Submit(prompts[i], Greedy(10), c[i].Callback()).ok());
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(c[i].Wait());
    ExpectSameOrNearTie(c[i].Tokens(), alone[i], alone_lp[i], "request " + std::to_string(i));
    EXPECT_EQ(c[i].Final().finish_reason, "length");
  }
  const ServingMetrics m = batch->Metrics();
  EXPECT_GT(m.mixed_steps, 0) << "no step ran prefills and decodes together";
  EXPECT_EQ(m.requests_finished_length, n);
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.generation_tokens, n * 10);
  EXPECT_EQ(m.ttft_s.count, n);
  EXPECT_EQ(m.inter_token_s.count, n * 9);
}

// Dense prefills cut into chunks of what a 24-token budget leaves beside the running decodes
// (SchedulerConfig::chunked_prefill) give the tokens of the same requests prefilled whole, alone
// (or a near tie: the chunks' matmuls have other row counts), and their steps carry decodes.
TEST_F(BatchEngineTest, ChunkedDensePrefillsGiveTheirWholePrefillTokens) {
  const int n = 4;
  std::vector<std::vector<int32_t>> prompts;
  SamplingParams p = Greedy(8);
  p.uniprefill = false;
  int prompt_tokens = 0;
  for (int i = 0; i < n; ++i) {
    prompts.push_back(Prompt(60 + 45 * i, 300 + i));
    prompt_tokens += static_cast<int>(prompts.back().size());
  }
  const std::vector<WholeOutput> alone = RunEachWhole(prompts, p);
  ServingOptions o;
  o.max_batched_tokens = 24;
  auto batch = Start(o);
  std::vector<Collector> c(n);
  for (int i = 0; i < n; ++i) ASSERT_TRUE(batch->Submit(prompts[i], p, c[i].Callback()).ok());
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(c[i].Wait());
    ExpectSameOrNearTie(c[i].Tokens(), Ids(alone[i].sampled), alone[i].sampled,
                        "request " + std::to_string(i));
    EXPECT_EQ(c[i].Final().finish_reason, "length");
    EXPECT_EQ(c[i].Final().usage.prompt_tokens, static_cast<int>(prompts[i].size()));
  }
  const ServingMetrics m = batch->Metrics();
  EXPECT_EQ(m.prompt_tokens, prompt_tokens);  // every prompt token computed once
  // No step held more than 24 tokens, so the prefills took at least this many steps.
  EXPECT_GE(m.steps, (prompt_tokens + n * 8) / 24);
  EXPECT_GT(m.mixed_steps, 0) << "no chunk shared a step with decodes";
  EXPECT_EQ(m.ttft_s.count, n);
  EXPECT_EQ(m.kv_blocks_used, 0);
}

TEST_F(BatchEngineTest, BurstLargerThanKvMemoryCompletesEveryRequest) {
  // 16 requests of ~100 + 24 tokens; the pool holds about three of them.
  ServingOptions o;
  o.kv_block_tokens = 16;
  testing::TinyGemma3Options tiny;
  // K+V of one token of one layer: 2 * 128 floats = 1 KiB; 12 layers, 2 segments, sliding layers
  // released: a 124-token request holds well under 12 * 8 blocks of 16 KiB.
  o.kv_cache_memory = int64_t{3} * 12 * 8 * 16 * 1024;
  o.max_batched_tokens = 512;
  auto batch = Start(o);
  const int n = 16;
  std::vector<Collector> c(n);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(batch->Submit(Prompt(100, 100 + i), Greedy(24), c[i].Callback()).ok());
  }
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(c[i].Wait()) << "request " << i << " never finished";
    EXPECT_EQ(c[i].Final().finish_reason, "length");
    EXPECT_EQ(c[i].Tokens().size(), 24u);
  }
  // Some request waited for KV memory: it was first scheduled after another had finished.
  double max_queue = 0, min_e2e = 1e9;
  for (int i = 0; i < n; ++i) {
    max_queue = std::max(max_queue, c[i].Final().usage.queue_s);
    min_e2e = std::min(min_e2e, c[i].Final().usage.e2e_s);
  }
  const ServingMetrics m = batch->Metrics();
  EXPECT_TRUE(max_queue > min_e2e || m.preemptions > 0)
      << "the burst fit the KV memory: nothing waited";
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.kv_bytes_used, 0);
  EXPECT_EQ(m.requests_finished_length, n);
}

// A preempted request is recomputed from its prompt and the tokens it had generated; dense, that
// prefill rebuilds the cache its decodes had built, so every request of a burst that the KV pool
// cannot hold produces its alone output however often it was preempted.
TEST_F(BatchEngineTest, PreemptedDenseRequestsProduceTheirAloneOutput) {
  SamplingParams p = Greedy(kBurstOutputTokens);
  p.uniprefill = false;
  const std::vector<Request> requests = Burst(p);
  const std::vector<std::vector<SampledToken>> alone = RunAlone(requests);
  std::vector<Collector> c(requests.size());
  RunPreempting(requests, c);
  for (size_t i = 0; i < requests.size(); ++i) {
    const RequestUpdate f = c[i].Final();
    EXPECT_TRUE(f.usage.kept.empty()) << "request " << i << " dropped tokens";
    ExpectSameOutput(c[i].Sampled(), alone[i],
                     "request " + std::to_string(i) + " (preempted " +
                         std::to_string(f.usage.preemptions) + " times)");
  }
}

// The same with seeded sampling: a request keeps its sampler (random generator, penalty history)
// through a preemption, so a recomputed request draws the tokens it draws alone. Exact ids: a draw
// flips only where a ~1e-6 change of the logits moves a cumulative probability across the uniform
// number drawn, which practically never happens.
TEST_F(BatchEngineTest, PreemptedSeededRequestsDrawTheirAloneTokens) {
  SamplingParams p = Greedy(kBurstOutputTokens);
  p.uniprefill = false;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  std::vector<Request> requests = Burst(p);
  for (size_t i = 0; i < requests.size(); ++i) requests[i].params.seed = 1000 + i;
  const std::vector<std::vector<SampledToken>> alone = RunAlone(requests);
  std::vector<Collector> c(requests.size());
  RunPreempting(requests, c);
  int not_argmax = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::vector<SampledToken> got = c[i].Sampled();
    const std::string what =
        "request " + std::to_string(i) + " (preempted " +
        std::to_string(c[i].Final().usage.preemptions) + " times)";
    EXPECT_EQ(Ids(got), Ids(alone[i])) << what;
    ExpectSameLogprobs(got, alone[i], what);
    for (const SampledToken& t : got) not_argmax += t.id != t.top[0].id;
  }
  EXPECT_GT(not_argmax, 0) << "every draw took the most likely token: nothing was sampled";
}

// With UniPrefill a recompute is a new prefill of prompt + generated tokens, and it selects anew
// (over more tokens, the generated ones being the last queries), so a preempted request
// legitimately parts from its alone run (its logits move far beyond rounding). What it must
// reproduce is that prefill: from each preemption on, its output is that of a request whose prompt
// is the original one plus the tokens generated before the preemption, run alone (the repetition
// window, the last 64 tokens of prompt and output, is the same for both). Greedy only: such a
// request starts its own random generator, which the preempted request does not.
// With a budget of 12 or 6 tokens a step, every prefill (20 prompt tokens, or a recompute of the
// prompt and its output so far) runs segment-wise in chunks, and preemptions strike requests in
// the middle of segment 0 (their boundary already holding rows); each piece of output still
// equals a whole prefill of what came before it, alone.
class PreemptedUniPrefillTest : public BatchEngineTest,
                                public ::testing::WithParamInterface<int> {};

TEST_P(PreemptedUniPrefillTest, RequestsContinueAsAPrefillOfWhatTheyGenerated) {
  const std::vector<Request> requests = Burst(Greedy(kBurstOutputTokens));
  std::vector<Collector> c(requests.size());
  RunPreempting(requests, c, /*max_batched_tokens=*/GetParam());
  // The references: each request's output from its start, then from each preemption, up to the
  // next one.
  struct Piece {
    size_t request;
    int from, to;  // output tokens [from, to) of the request
  };
  std::vector<Piece> pieces;
  std::vector<Request> references;
  for (size_t i = 0; i < requests.size(); ++i) {
    const RequestUpdate f = c[i].Final();
    ASSERT_EQ(f.usage.kept.size(), 1u) << "request " << i;
    EXPECT_LT(f.usage.kept[0].kept, f.usage.kept[0].alive) << "request " << i << " kept all";
    std::vector<int> cuts = c[i].TokensAtPreemptions();
    ASSERT_EQ(static_cast<int>(cuts.size()), f.usage.preemptions) << "request " << i;
    const std::vector<int32_t> got = c[i].Tokens();
    cuts.insert(cuts.begin(), 0);
    cuts.push_back(static_cast<int>(got.size()));
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      // Preempted again during a recompute (a chunked prefill spans steps): no output between.
      if (cuts[k + 1] == cuts[k]) continue;
      pieces.push_back({i, cuts[k], cuts[k + 1]});
      Request r = requests[i];
      r.prompt.insert(r.prompt.end(), got.begin(), got.begin() + cuts[k]);
      r.params.max_tokens = cuts[k + 1] - cuts[k];
      references.push_back(std::move(r));
    }
  }
  const std::vector<std::vector<SampledToken>> alone = RunAlone(references);
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    const std::vector<SampledToken> got = c[p.request].Sampled();
    ExpectSameOutput({got.begin() + p.from, got.begin() + p.to}, alone[k],
                     "request " + std::to_string(p.request) + ", output tokens from " +
                         std::to_string(p.from));
  }
}

INSTANTIATE_TEST_SUITE_P(Budgets, PreemptedUniPrefillTest, ::testing::Values(8192, 12, 6));

// UniPrefill prompts longer than a 24-token budget run segment-wise in chunks beside the running
// decodes (SchedulerConfig::segment_chunks): each keeps what its prefill kept whole, alone, and
// gives the same tokens (or a near tie), and chunks share steps with decodes.
TEST_F(BatchEngineTest, SegmentChunkedUniPrefillPrefillsKeepWhatWholePrefillsKeep) {
  const int n = 4;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) prompts.push_back(Prompt(70 + 45 * i, 400 + i));
  const SamplingParams p = Greedy(8);
  const std::vector<WholeOutput> alone = RunEachWhole(prompts, p);
  ServingOptions o;
  o.max_batched_tokens = 24;
  auto batch = Start(o);
  std::vector<Collector> c(n);
  for (int i = 0; i < n; ++i) ASSERT_TRUE(batch->Submit(prompts[i], p, c[i].Callback()).ok());
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(c[i].Wait());
    const std::string what = "request " + std::to_string(i);
    ExpectSameOutput(c[i].Sampled(), alone[i].sampled, what);
    const std::vector<KeptTokensInfo> kept = c[i].Final().usage.kept;
    const std::vector<KeptTokensInfo>& whole_kept = alone[i].kept;
    ASSERT_EQ(kept.size(), 1u) << what;
    ASSERT_EQ(whole_kept.size(), 1u) << what;
    EXPECT_EQ(kept[0].layer, whole_kept[0].layer) << what;
    EXPECT_EQ(kept[0].kept, whole_kept[0].kept) << what;
    EXPECT_EQ(kept[0].alive, whole_kept[0].alive) << what;
    EXPECT_LT(kept[0].kept, kept[0].alive) << what;
  }
  const ServingMetrics m = batch->Metrics();
  int prompt_tokens = 0;
  for (const auto& q : prompts) prompt_tokens += static_cast<int>(q.size());
  EXPECT_EQ(m.prompt_tokens, prompt_tokens);  // segment 0's tokens once; later segments are rows
  EXPECT_GT(m.mixed_steps, 0) << "no chunk shared a step with decodes";
  EXPECT_EQ(m.kv_blocks_used, 0);
}

// ServingOptions::dense_segment_chunks: dense prompts too long for a step run segment-wise (at
// the drop layers' boundaries, every row kept) and give what they give prefilled whole, each
// token's logprobs too; they report no selection. Off (the default), their chunks run every layer.
TEST_F(BatchEngineTest, SegmentChunkedDensePrefillsGiveTheirWholePrefillOutput) {
  const int n = 3;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) prompts.push_back(Prompt(70 + 45 * i, 500 + i));
  SamplingParams p = Greedy(8);
  p.uniprefill = false;
  p.logprobs = 2;
  const std::vector<WholeOutput> alone = RunEachWhole(prompts, p);
  for (bool segment_wise : {true, false}) {
    SCOPED_TRACE(segment_wise ? "segment-wise" : "all layers");
    ServingOptions o;
    o.max_batched_tokens = 24;
    o.dense_segment_chunks = segment_wise;
    auto batch = Start(o);
    std::vector<Collector> c(n);
    for (int i = 0; i < n; ++i) ASSERT_TRUE(batch->Submit(prompts[i], p, c[i].Callback()).ok());
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(c[i].Wait());
      const std::string what = "request " + std::to_string(i);
      ExpectSameOutput(c[i].Sampled(), alone[i].sampled, what);
      EXPECT_TRUE(c[i].Final().usage.kept.empty()) << what;
    }
    const ServingMetrics m = batch->Metrics();
    if (segment_wise) {
      // Each prompt is longer than the step: at least one chunk in each of its segments.
      EXPECT_GE(m.dense_segment_chunks, 2 * n);
    } else {
      EXPECT_EQ(m.dense_segment_chunks, 0);
    }
    EXPECT_EQ(m.segment_chunks, m.dense_segment_chunks);
    EXPECT_GT(m.mixed_steps, 0) << "no chunk shared a step with decodes";
    EXPECT_EQ(m.kv_blocks_used, 0);
  }
}

TEST_F(BatchEngineTest, CancelEndsTheRequestAndFreesItsKv) {
  auto batch = Start();
  Collector c;
  SamplingParams p = Greedy(1500);
  Result<int64_t> id = batch->Submit(Prompt(100, 3), p, c.Callback());
  ASSERT_TRUE(id.ok());
  // Let it produce a few tokens, then cancel.
  for (int i = 0; i < 200 && c.Tokens().size() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  batch->Cancel(*id);
  ASSERT_TRUE(c.Wait());
  EXPECT_EQ(c.Final().finish_reason, "abort");
  EXPECT_LT(c.Tokens().size(), 1500u);
  for (int i = 0; i < 100 && batch->Metrics().kv_blocks_used != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const ServingMetrics m = batch->Metrics();
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.requests_aborted, 1);
  batch->Cancel(*id);  // a finished id is ignored
  batch->Cancel(12345);
}

TEST_F(BatchEngineTest, StopStringsAndLogprobsAgreeWithGenerate) {
  auto batch = Start();
  const std::vector<int32_t> prompt = Prompt(60, 9);
  SamplingParams p = Greedy(20);
  p.logprobs = 3;
  Result<GenerationResult> full = engine_->Generate(prompt, p);
  ASSERT_TRUE(full.ok());
  ASSERT_GE(full->text.size(), 6u);
  p.stop = {full->text.substr(3, 2)};
  Result<GenerationResult> want = engine_->Generate(prompt, p);
  ASSERT_TRUE(want.ok());
  Collector c;
  ASSERT_TRUE(batch->Submit(prompt, p, c.Callback()).ok());
  ASSERT_TRUE(c.Wait());
  EXPECT_EQ(c.Text(), want->text);
  EXPECT_EQ(c.Final().finish_reason, "stop");
  for (const RequestUpdate& u : c.updates) {
    for (const SampledToken& t : u.tokens) {
      ASSERT_EQ(t.top.size(), 3u);
      EXPECT_EQ(t.top[0].id, t.id);  // greedy takes the most likely token
      EXPECT_FLOAT_EQ(t.top[0].logprob, t.logprob);
      EXPECT_LE(t.logprob, 0.0f);
      EXPECT_GE(t.top[0].logprob, t.top[1].logprob);
    }
  }
}

TEST_F(BatchEngineTest, BadRequestsAreRefusedNamingTheProblem) {
  ServingOptions o;
  o.kv_cache_memory = 64 * 16 * 1024;  // 64 blocks
  auto batch = Start(o);
  auto expect_error = [&](std::vector<int32_t> prompt, SamplingParams p, ErrorCode code,
                          const std::string& words) {
    Result<int64_t> r = batch->Submit(std::move(prompt), p, nullptr);
    ASSERT_FALSE(r.ok()) << words;
    EXPECT_EQ(r.status().code(), code) << r.status().message();
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
  };
  expect_error({}, Greedy(4), ErrorCode::kInvalidArgument, "empty");
  expect_error({1, 99999}, Greedy(4), ErrorCode::kInvalidArgument, "outside the vocabulary");
  expect_error(Prompt(10, 1), Greedy(0), ErrorCode::kInvalidArgument, "max_tokens");
  SamplingParams hot = Greedy(4);
  hot.temperature = 7;
  expect_error(Prompt(10, 1), hot, ErrorCode::kInvalidArgument, "temperature");
  expect_error(Prompt(10, 1), Greedy(5000), ErrorCode::kOutOfRange, "context");
  expect_error(Prompt(1000, 1), Greedy(100), ErrorCode::kOutOfRange, "--kv-cache-memory");
  SamplingParams other_layers = Greedy(4);
  other_layers.uniprefill_options = UniPrefillOptions{};
  other_layers.uniprefill_options->drop_layers = std::vector<int>{11};
  expect_error(Prompt(10, 1), other_layers, ErrorCode::kInvalidArgument, "drop_layers");
  // ... and names the flag that does change them (`--drop-layers`, not a flag that does not exist).
  expect_error(Prompt(10, 1), other_layers, ErrorCode::kInvalidArgument,
               "restart it with --drop-layers");
  SamplingParams bad_ratio = Greedy(4);
  bad_ratio.uniprefill_options = UniPrefillOptions{};
  bad_ratio.uniprefill_options->keep_ratio = 2.0f;
  expect_error(Prompt(10, 1), bad_ratio, ErrorCode::kInvalidArgument, "ratio");
  // Still serving.
  Collector c;
  ASSERT_TRUE(batch->Submit(Prompt(10, 1), Greedy(3), c.Callback()).ok());
  ASSERT_TRUE(c.Wait());
  EXPECT_EQ(c.Tokens().size(), 3u);
}

TEST_F(BatchEngineTest, PerRequestSelectionOverridesTheKeepRatio) {
  auto batch = Start();
  const std::vector<int32_t> prompt = Prompt(200, 5);
  auto kept_with = [&](float ratio) {
    SamplingParams p = Greedy(2);
    p.uniprefill_options = UniPrefillOptions{};
    p.uniprefill_options->keep_ratio = ratio;
    Collector c;
    EXPECT_TRUE(batch->Submit(prompt, p, c.Callback()).ok());
    EXPECT_TRUE(c.Wait());
    const RequestUpdate f = c.Final();
    return f.usage.kept.empty() ? -1 : f.usage.kept[0].kept;
  };
  const int half = kept_with(0.5f), quarter = kept_with(0.25f);
  EXPECT_GT(half, quarter);
  EXPECT_GT(quarter, 0);
}

TEST_F(BatchEngineTest, ShutdownAbortsWhatIsLeft) {
  std::vector<Collector> c(3);
  {
    auto batch = Start();
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(batch->Submit(Prompt(50, i), Greedy(1500), c[i].Callback()).ok());
    }
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c[i].Wait(5));
    EXPECT_EQ(c[i].Final().finish_reason, "abort");
  }
}

// serve's step budgets when the user sets neither: the CPU's as before, CUDA's the configuration
// the H200's served goals were measured with.
TEST(StepBudgetsTest, EachDeviceGetsItsMeasuredDefault) {
  const StepBudgets cpu = DefaultStepBudgets("cpu");
  EXPECT_EQ(cpu.max_batched_tokens, 8192);
  EXPECT_EQ(cpu.prefill_only_tokens, 0);
  const StepBudgets cuda = DefaultStepBudgets("cuda");
  EXPECT_EQ(cuda.max_batched_tokens, 2048);
  EXPECT_EQ(cuda.prefill_only_tokens, 8192);
  const StepBudgets other = DefaultStepBudgets("tpu");  // not a device serve accepts: the CPU's
  EXPECT_EQ(other.max_batched_tokens, 8192);
  EXPECT_EQ(other.prefill_only_tokens, 0);
}

}  // namespace
}  // namespace uniprefill
