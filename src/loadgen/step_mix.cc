// ParseStepMixes and TimeStepMix (step_mix.h).
#include "loadgen/step_mix.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <memory>
#include <random>
#include <span>

namespace uniprefill {
namespace {

constexpr const char* kGrammar =
    "items are dN@L (N decodes over L cached tokens), cR@K (a dense chunk of R tokens over K "
    "cached, not its prompt's last), lR@K (its prompt's last chunk), sR@K (a segment-0 UniPrefill "
    "chunk), joined by '+'; mixes are separated by ';'";
// Counts beyond this are typing errors, not benchmarks (and keep sums in int).
constexpr int64_t kMaxTokens = int64_t{1} << 24;
constexpr int kMaxDecodes = 1024;
// Prefixes are prefilled in forwards of at most this many rows (activations of a whole 128K
// prompt would dwarf the step under test).
constexpr int kPrefillPiece = 16384;

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// A whole number of at most kMaxTokens, or -1.
int64_t ParseCount(const std::string& s) {
  if (s.empty() || s.size() > 9) return -1;
  int64_t v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
    v = v * 10 + (c - '0');
  }
  return v <= kMaxTokens ? v : -1;
}

Result<StepItem> ParseItem(const std::string& raw) {
  std::string text;
  for (char c : raw) {
    if (!std::isspace(static_cast<unsigned char>(c))) text += c;
  }
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("step item '" + raw + "': " + why + " (" + kGrammar + ")");
  };
  if (text.empty()) return bad("empty");
  const size_t at = text.find('@');
  if (at == std::string::npos) return bad("no '@' before the cached tokens");
  StepItem item;
  item.kind = text[0];
  if (item.kind != 'd' && item.kind != 'c' && item.kind != 'l' && item.kind != 's') {
    return bad(std::string("unknown kind '") + item.kind + "'");
  }
  const int64_t n = ParseCount(text.substr(1, at - 1));
  const int64_t depth = ParseCount(text.substr(at + 1));
  if (n < 1) return bad("the count before '@' must be a whole number >= 1");
  if (depth < 0) return bad("the cached tokens after '@' must be a whole number >= 0");
  if (item.kind == 'd') {
    if (n > kMaxDecodes) return bad("at most " + std::to_string(kMaxDecodes) + " decodes");
    if (depth < 1) return bad("a decode needs at least 1 cached token");
    item.count = static_cast<int>(n);
    item.rows = 1;
  } else {
    item.rows = static_cast<int>(n);
  }
  item.depth = static_cast<int>(depth);
  return item;
}

// Tokens of one chunk's prompt: its prefix, its rows, and what must follow them (a chunk before
// its prompt's last: its rows again; a segment chunk: the last n rows its segment's last chunk
// holds).
int PromptTokens(const StepItem& item, int last_n) {
  switch (item.kind) {
    case 'c': return item.depth + 2 * item.rows;
    case 's': return item.depth + item.rows + std::max(1, last_n);
    default: return item.depth + item.rows;
  }
}

// Where a chunk item's one cache for every forward starts (TimeStepMix): each forward's chunk
// follows the last, and the middle timed forward's (the median's) runs over exactly K cached
// tokens. Negative: K is too shallow for that, and each forward gets a fresh cache over K.
int AdvancingStart(const StepItem& item, const StepMixOptions& o) {
  const int center = o.warmup + (o.repeats - 1) / 2;
  return item.depth - center * item.rows;
}

int32_t ArgMax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

bool StepMix::has_segment_chunk() const {
  return std::any_of(items.begin(), items.end(), [](const StepItem& i) { return i.kind == 's'; });
}

int StepMix::requests() const {
  int n = 0;
  for (const StepItem& i : items) n += i.count;
  return n;
}

int StepMix::new_rows() const {
  int n = 0;
  for (const StepItem& i : items) n += i.count * i.rows;
  return n;
}

Result<std::vector<StepMix>> ParseStepMixes(const std::string& text) {
  std::vector<StepMix> mixes;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(';', begin);
    if (end == std::string::npos) end = text.size();
    const std::string one = Trim(text.substr(begin, end - begin));
    begin = end + 1;
    if (one.empty()) continue;  // "a; b;" is two mixes
    StepMix mix;
    mix.text = one;
    size_t from = 0;
    while (from <= one.size()) {
      size_t plus = one.find('+', from);
      if (plus == std::string::npos) plus = one.size();
      UP_ASSIGN_OR_RETURN(StepItem item, ParseItem(one.substr(from, plus - from)));
      mix.items.push_back(item);
      from = plus + 1;
    }
    int64_t rows = 0;
    for (const StepItem& i : mix.items) rows += int64_t{i.count} * i.rows;
    if (rows > kMaxTokens) {
      return InvalidArgument("step mix '" + one + "': more than " + std::to_string(kMaxTokens) +
                             " rows in one forward");
    }
    mixes.push_back(std::move(mix));
  }
  if (mixes.empty()) return InvalidArgument(std::string("no step mix given (") + kGrammar + ")");
  return mixes;
}

int64_t StepItemCacheTokens(const StepItem& item, const StepMixOptions& options) {
  const int runs = options.warmup + options.repeats;
  if (item.kind == 'd') return int64_t{item.depth} + runs + 1;
  const int64_t prompt = PromptTokens(item, options.uniprefill.selection.last_n);
  const int start = AdvancingStart(item, options);
  // Advancing: the prompt's tokens past K's chunk, plus the chunks after the middle one.
  return start < 0 ? prompt : prompt + int64_t{runs - 1} * item.rows - (item.depth - start);
}

int64_t StepMixCacheTokens(const StepMix& mix, const StepMixOptions& options) {
  int64_t tokens = 0;
  for (const StepItem& i : mix.items) tokens += int64_t{i.count} * StepItemCacheTokens(i, options);
  return tokens;
}

Result<StepMixTiming> TimeStepMix(Model& model, DeviceContext& ctx, const StepMix& mix,
                                  const StepMixOptions& options) {
  const bool segment_wise = mix.has_segment_chunk();
  UniPrefillConfig up = options.uniprefill;
  if (!segment_wise) up.enabled = false;
  const std::vector<int> drops = segment_wise ? up.active_drop_layers() : std::vector<int>{};
  if (segment_wise && (drops.empty() || !model.supports_segment_chunks())) {
    return InvalidArgument("step mix '" + mix.text +
                           "': s items need a model with UniPrefill drop layers that runs "
                           "segment-wise chunks");
  }
  const int last_n = up.selection.last_n;
  const int vocab = model.config().vocab_size;
  const bool on_device = options.device_sampling && model.device() == Device::kCuda;
  std::mt19937 rng(options.seed);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  const auto random_ids = [&](int n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = token(rng);
    return ids;
  };
  // One request's view of the forward: what it feeds and where its token goes.
  struct Request {
    std::unique_ptr<SequenceCache> cache;
    std::vector<int32_t> ids;  // the prompt (chunks) or the fed token (decodes)
    std::vector<float> logits;
    int32_t chosen = 0;
    StepSampling sampling;
    SegmentChunk chunk;
    std::vector<KeptTokens> kept;
  };
  // Wants the next token: decodes and last chunks (on the device or from host logits).
  const auto wants_token = [&](Request& r, SequenceStep& s) {
    if (on_device) {
      r.sampling.token = &r.chosen;
      s.sampling = &r.sampling;
    } else {
      r.logits.resize(static_cast<size_t>(vocab));
      s.logits = r.logits.data();
    }
  };
  // A request's first `tokens` prompt tokens, untimed, in pieces: dense, or as segment-0 chunks
  // of a segment-wise prefill of `total` rows.
  const auto prefill = [&](Request& r, bool segment, int total, int tokens) -> Status {
    for (int done = 0; done < tokens;) {
      const int n = std::min(kPrefillPiece, tokens - done);
      SequenceStep s;
      s.cache = r.cache.get();
      s.tokens = std::span<const int32_t>(r.ids).subspan(static_cast<size_t>(done),
                                                         static_cast<size_t>(n));
      s.allow_drop = segment;
      if (segment) {
        r.chunk = SegmentChunk{0, n, total, false};
        s.chunk = &r.chunk;
        s.kept = &r.kept;
      }
      UP_RETURN_IF_ERROR(model.ForwardBatch(ctx, std::span<const SequenceStep>(&s, 1), up));
      done += n;
    }
    return OkStatus();
  };

  // A chunk deep enough keeps one cache for every forward, prefilled once (untimed) to its
  // AdvancingStart: re-prefilling an 80K prefix before each of 7 forwards took ~30 s of an H200
  // call for one mix. Shallower chunks get a fresh cache over K before each forward.
  const int runs = options.warmup + options.repeats;
  std::vector<std::unique_ptr<Request>> advancing(mix.items.size());
  for (size_t k = 0; k < mix.items.size(); ++k) {
    const StepItem& item = mix.items[k];
    const int start = AdvancingStart(item, options);
    if (item.kind == 'd' || start < 0) continue;
    auto r = std::make_unique<Request>();
    const int total = static_cast<int>(StepItemCacheTokens(item, options));
    r->cache = model.NewCache(total, drops);
    r->cache->ExpectPrefill(total, item.kind != 's');
    r->ids = random_ids(total);
    UP_RETURN_IF_ERROR(prefill(*r, item.kind == 's', total, start));
    advancing[k] = std::move(r);
  }

  std::vector<std::unique_ptr<Request>> decodes;
  for (const StepItem& item : mix.items) {
    if (item.kind != 'd') continue;
    for (int i = 0; i < item.count; ++i) {
      auto r = std::make_unique<Request>();
      r->cache = model.NewCache(static_cast<int>(StepItemCacheTokens(item, options)), drops);
      r->cache->ExpectPrefill(item.depth, true);
      r->ids = random_ids(item.depth);
      UP_RETURN_IF_ERROR(prefill(*r, false, item.depth, item.depth));
      r->ids = random_ids(1);
      decodes.push_back(std::move(r));
    }
  }

  StepMixTiming timing;
  for (int it = 0; it < runs; ++it) {
    std::vector<std::unique_ptr<Request>> fresh;
    for (size_t k = 0; k < mix.items.size(); ++k) {
      const StepItem& item = mix.items[k];
      if (item.kind == 'd' || advancing[k]) continue;
      auto r = std::make_unique<Request>();
      const int total = PromptTokens(item, last_n);
      r->cache = model.NewCache(total, drops);
      // As serve does: the cache lays out runs of blocks, so chunks read their prefix in place.
      r->cache->ExpectPrefill(total, item.kind != 's');
      r->ids = random_ids(total);
      UP_RETURN_IF_ERROR(prefill(*r, item.kind == 's', total, item.depth));
      fresh.push_back(std::move(r));
    }
    // The step as the scheduler orders it: every decode first, then the prefill chunks.
    std::vector<SequenceStep> steps;
    for (auto& r : decodes) {
      SequenceStep s;
      s.cache = r->cache.get();
      s.tokens = r->ids;
      s.allow_drop = false;
      wants_token(*r, s);
      steps.push_back(s);
    }
    size_t next_fresh = 0;
    for (size_t k = 0; k < mix.items.size(); ++k) {
      const StepItem& item = mix.items[k];
      if (item.kind == 'd') continue;
      Request& r = advancing[k] ? *advancing[k] : *fresh[next_fresh++];
      // This forward's chunk starts where the cache's prompt tokens end.
      const int at = advancing[k] ? AdvancingStart(item, options) + it * item.rows : item.depth;
      SequenceStep s;
      s.cache = r.cache.get();
      s.tokens = std::span<const int32_t>(r.ids).subspan(static_cast<size_t>(at),
                                                         static_cast<size_t>(item.rows));
      s.allow_drop = item.kind == 's';
      if (item.kind == 'l') wants_token(r, s);
      if (item.kind == 's') {
        const int segment_rows = advancing[k] ? static_cast<int>(StepItemCacheTokens(item, options))
                                              : PromptTokens(item, last_n);
        r.chunk = SegmentChunk{0, item.rows, segment_rows, false};
        s.chunk = &r.chunk;
        s.kept = &r.kept;
      }
      steps.push_back(s);
    }
    ctx.Synchronize();  // the prefixes' forwards are not part of the step
    const bool timed = it >= options.warmup;
    if (timed && options.around_timed_forward) options.around_timed_forward(true);
    ForwardStats stats;
    const auto start = std::chrono::steady_clock::now();
    const Status forward = model.ForwardBatch(ctx, steps, up, nullptr, &stats);
    ctx.Synchronize();  // a forward that returns nothing to the host may not have waited
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count();
    if (timed && options.around_timed_forward) options.around_timed_forward(false);
    UP_RETURN_IF_ERROR(forward);
    if (timed) {
      timing.forward_ms.push_back(ms);
      timing.stats = stats;
    }
    // Each decode feeds the token it chose (host models: the argmax of its logits).
    for (auto& r : decodes) r->ids[0] = on_device ? r->chosen : ArgMax(r->logits);
  }
  return timing;
}

}  // namespace uniprefill
