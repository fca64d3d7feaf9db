// Serving under tensor parallelism in one process, for the tests of BatchEngine::Start on rank 0
// and BatchEngine::Follow on the others (tests/engine/tp_serving_test.cc on the CPU,
// tests/dist/cuda/cuda_tp_serving_test.cc on one GPU): every rank loads the product's Engine on
// its own communicator (engine/engine_impl.h's EngineLoader: ranks as threads, or a world of
// one), rank 0 serves a list of requests submitted at once and the others follow until rank 0
// stops. Without communicators it is the plain server (Engine::Load, no tensor parallelism), the
// reference the tests compare with.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "engine/engine_impl.h"
#include "uniprefill/batch_engine.h"
#include "uniprefill/engine.h"

namespace uniprefill::testing {

struct ServedRequest {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

// What a request got: its tokens, how it ended and what its drops kept.
struct Served {
  std::vector<int32_t> tokens;
  std::vector<SampledToken> sampled;  // with their logprobs, when the request asked for them
  std::string finish_reason, error;
  std::vector<KeptTokensInfo> kept;
  bool operator==(const Served& o) const {
    if (tokens != o.tokens || finish_reason != o.finish_reason || error != o.error ||
        kept.size() != o.kept.size()) {
      return false;
    }
    for (size_t i = 0; i < kept.size(); ++i) {
      if (kept[i].layer != o.kept[i].layer || kept[i].kept != o.kept[i].kept ||
          kept[i].alive != o.kept[i].alive) {
        return false;
      }
    }
    return true;
  }
};

struct ServeRun {
  std::vector<Served> served;  // one per request, in order
  std::string error;           // a rank failed to load, start, follow or stop
  ServingMetrics metrics;      // rank 0's, after the last request finished
};

// A tiny checkpoint (tests/goldens/hf_tiny/<family>: token-id prompts) on `device`, UniPrefill
// fixed-ratio 0.5 at `drop_layers` with 8-token blocks, sink and window, so 100-token prompts drop.
inline EngineOptions TinyServingOptions(const std::string& dir, const std::string& device,
                                        std::vector<int> drop_layers) {
  EngineOptions o;
  o.model_path = dir;
  o.device = device;
  o.threads = 1;
  o.f32_decode = true;  // CPU: one-row and many-row matmuls share f32 arithmetic
  o.uniprefill.drop_layers = std::move(drop_layers);
  o.uniprefill.mode = SelectionMode::kFixedRatio;
  o.uniprefill.keep_ratio = 0.5f;
  o.uniprefill.block_size = 8;
  o.uniprefill.sink = 8;
  o.uniprefill.last_n = 8;
  return o;
}

// A 64-token step budget: the long prompts run in chunks beside the other requests' decodes.
inline ServingOptions SmallServingSteps() {
  ServingOptions s;
  s.kv_cache_memory = int64_t{64} << 20;
  s.max_batched_tokens = 64;
  return s;
}

// Six requests of 10 tokens each (EOS ignored): 9 to 200-token prompts of ids in [3, 500),
// UniPrefill on and off, greedy and seeded sampling (chosen on the device by a GPU rank 0), one
// asking for logprobs (sampled from host logits).
inline std::vector<ServedRequest> TpServeRequests() {
  std::vector<ServedRequest> reqs;
  const std::vector<int> lengths = {200, 30, 160, 9, 120, 140};
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(3, 499);
  for (size_t i = 0; i < lengths.size(); ++i) {
    ServedRequest r;
    for (int j = 0; j < lengths[i]; ++j) r.prompt.push_back(tok(rng));
    r.params.max_tokens = 10;
    r.params.ignore_eos = true;
    r.params.uniprefill = i != 2;
    if (i % 2 == 1) {
      r.params.temperature = 0.8f;
      r.params.seed = 7 + i;
    }
    if (i == 5) r.params.logprobs = 2;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

// TpServeRequests' prompts, every one greedy with its top 5 logprobs (chosen from host logits):
// what a bf16 GPU run under TP is compared by, where token-for-token equality is not owed.
inline std::vector<ServedRequest> TpServeGreedyLogprobRequests() {
  std::vector<ServedRequest> reqs = TpServeRequests();
  for (ServedRequest& r : reqs) {
    r.params.temperature = 0.0f;
    r.params.logprobs = 5;
  }
  return reqs;
}

// Submits every request to `batch` at once and waits for all of them (at most `wait_s`).
inline std::vector<Served> ServeAll(BatchEngine& batch, const std::vector<ServedRequest>& reqs,
                                    std::string* error, int wait_s = 300) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Served> served(reqs.size());
  size_t finished = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto id = batch.Submit(reqs[i].prompt, reqs[i].params, [&, i](const RequestUpdate& u) {
      std::lock_guard<std::mutex> lock(mu);
      for (const SampledToken& t : u.tokens) {
        served[i].tokens.push_back(t.id);
        served[i].sampled.push_back(t);
      }
      if (u.finished) {
        served[i].finish_reason = u.finish_reason;
        served[i].error = u.error;
        served[i].kept = u.usage.kept;
        ++finished;
        cv.notify_all();
      }
    });
    if (!id.ok()) {
      *error = "submit request " + std::to_string(i) + ": " + id.status().message();
      std::lock_guard<std::mutex> lock(mu);
      ++finished;
    }
  }
  std::unique_lock<std::mutex> lock(mu);
  if (!cv.wait_for(lock, std::chrono::seconds(wait_s), [&] { return finished == reqs.size(); })) {
    *error = "the requests did not finish within " + std::to_string(wait_s) + " s";
  }
  return served;
}

// comms empty: one plain Engine::Load and BatchEngine. Otherwise one thread per communicator
// (rank r = comms[r]->rank()), each loading `options` on it (GPU ranks on `cuda_device`).
inline ServeRun ServeOnRanks(const EngineOptions& options, const ServingOptions& serving,
                             const std::vector<ServedRequest>& reqs,
                             std::vector<std::unique_ptr<dist::Communicator>> comms,
                             int cuda_device = 0) {
  ServeRun run;
  auto serve_rank0 = [&](Result<std::unique_ptr<Engine>> engine) {
    if (!engine.ok()) {
      run.error = "rank 0 load: " + engine.status().message();
      return;
    }
    auto batch = BatchEngine::Start(**engine, serving);
    if (!batch.ok()) {
      run.error = "rank 0 start: " + batch.status().message();
      return;
    }
    run.served = ServeAll(**batch, reqs, &run.error);
    run.metrics = (*batch)->Metrics();
    if (Status st = (*batch)->Stop(); !st.ok() && run.error.empty()) {
      run.error = "rank 0 stop: " + st.message();
    }
  };
  if (comms.empty()) {
    serve_rank0(Engine::Load(options));
    return run;
  }
  std::vector<std::string> follower_errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      const int rank = comms[r]->rank();
      auto engine = EngineLoader::Load(options, std::move(comms[r]), cuda_device);
      if (rank == 0) return serve_rank0(std::move(engine));
      if (!engine.ok()) {
        follower_errors[r] = "rank " + std::to_string(rank) + " load: " + engine.status().message();
        return;
      }
      if (Status st = BatchEngine::Follow(**engine, serving); !st.ok()) {
        follower_errors[r] = "rank " + std::to_string(rank) + " follow: " + st.message();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& e : follower_errors) {
    if (!e.empty()) run.error += (run.error.empty() ? "" : "; ") + e;
  }
  return run;
}

// got's requests ended as want's: tokens, finish reasons and kept counts at every drop.
inline void ExpectSameServed(const ServeRun& got, const ServeRun& want, const std::string& what) {
  ASSERT_TRUE(got.error.empty()) << what << ": " << got.error;
  ASSERT_EQ(got.served.size(), want.served.size());
  for (size_t i = 0; i < want.served.size(); ++i) {
    const Served& g = got.served[i];
    const Served& w = want.served[i];
    EXPECT_EQ(g.error, "") << what << ", request " << i;
    EXPECT_EQ(g.tokens, w.tokens) << what << ", request " << i;
    EXPECT_EQ(g.finish_reason, w.finish_reason) << what << ", request " << i;
    ASSERT_EQ(g.kept.size(), w.kept.size()) << what << ", request " << i;
    for (size_t k = 0; k < w.kept.size(); ++k) {
      EXPECT_EQ(g.kept[k].layer, w.kept[k].layer) << what << ", request " << i;
      EXPECT_EQ(g.kept[k].kept, w.kept[k].kept) << what << ", request " << i;
      EXPECT_EQ(g.kept[k].alive, w.kept[k].alive) << what << ", request " << i;
    }
  }
}

// got's requests ended as want's up to bf16 noise (requests of TpServeGreedyLogprobRequests):
// the same errors, finish reasons, lengths and kept counts at every drop (exact: the selection
// runs on all-reduced f32 scores); tokens equal with logprobs within `tol` nats until the first
// token where they part, which must be a near-tie of want's: got's token among want's top
// logprobs there, within `tol` of want's choice. Returns the largest logprob difference seen
// before the runs part, and counts in *parted the requests that parted.
inline double ExpectServedWithinNoise(const ServeRun& got, const ServeRun& want,
                                      const std::string& what, double tol, int* parted) {
  double worst = 0;
  *parted = 0;
  EXPECT_TRUE(got.error.empty()) << what << ": " << got.error;
  EXPECT_EQ(got.served.size(), want.served.size());
  if (!got.error.empty() || got.served.size() != want.served.size()) return worst;
  for (size_t i = 0; i < want.served.size(); ++i) {
    const Served& g = got.served[i];
    const Served& w = want.served[i];
    const std::string req = what + ", request " + std::to_string(i);
    EXPECT_EQ(g.error, w.error) << req;
    EXPECT_EQ(g.finish_reason, w.finish_reason) << req;
    EXPECT_EQ(g.sampled.size(), w.sampled.size()) << req;
    EXPECT_EQ(g.kept.size(), w.kept.size()) << req;
    for (size_t k = 0; k < w.kept.size() && k < g.kept.size(); ++k) {
      EXPECT_EQ(g.kept[k].kept, w.kept[k].kept) << req << ", drop " << k;
      EXPECT_EQ(g.kept[k].alive, w.kept[k].alive) << req << ", drop " << k;
    }
    for (size_t t = 0; t < w.sampled.size() && t < g.sampled.size(); ++t) {
      const SampledToken& gt = g.sampled[t];
      const SampledToken& wt = w.sampled[t];
      if (gt.id == wt.id) {
        worst = std::max(worst, static_cast<double>(std::fabs(gt.logprob - wt.logprob)));
        EXPECT_LE(std::fabs(gt.logprob - wt.logprob), tol) << req << ", token " << t;
        continue;
      }
      ++*parted;
      const auto alt = std::find_if(wt.top.begin(), wt.top.end(),
                                    [&](const TokenLogprob& x) { return x.id == gt.id; });
      EXPECT_TRUE(alt != wt.top.end())
          << req << ", token " << t << ": " << gt.id << " is not among the reference's top "
          << wt.top.size() << " (it chose " << wt.id << ")";
      if (alt != wt.top.end()) {
        EXPECT_LE(wt.logprob - alt->logprob, tol)
            << req << ", token " << t << ": parted without a near-tie";
      }
      break;  // the runs continue from different tokens
    }
  }
  return worst;
}

}  // namespace uniprefill::testing
