#include "model/packed_batch.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "ops/ops.h"
#include "sparsity/drop_plan.h"

namespace uniprefill {

const char* WalkPhaseName(WalkPhase phase) {
  switch (phase) {
    case WalkPhase::kBegin: return "begin";
    case WalkPhase::kEmbed: return "embed";
    case WalkPhase::kNorm: return "norm";
    case WalkPhase::kAttention: return "attention";
    case WalkPhase::kDropAttention: return "drop_attention";
    case WalkPhase::kDeltaNet: return "delta_net";
    case WalkPhase::kExchange: return "segment_exchange";
    case WalkPhase::kFfn: return "ffn";
    case WalkPhase::kMoe: return "moe";
    case WalkPhase::kFinish: return "finish";
    case WalkPhase::kCount: break;
  }
  return "?";
}

namespace {

Status CheckChunk(const SequenceStep& s, int n_segments, const std::string& who) {
  const SegmentChunk& c = *s.chunk;
  const auto str = [](int64_t v) { return std::to_string(v); };
  if (c.segment < 0 || c.segment >= n_segments) {
    return InvalidArgument(who + "chunk of segment " + str(c.segment) + " but the forward has " +
                           str(n_segments) + " segments");
  }
  if (c.rows < 1 || c.rows > c.segment_rows) {
    return InvalidArgument(who + "a chunk of " + str(c.rows) + " rows in a segment of " +
                           str(c.segment_rows) + " (1 .. segment_rows)");
  }
  const bool last_segment = c.segment + 1 == n_segments;
  if (!last_segment && (s.logits != nullptr || s.sampling != nullptr)) {
    return InvalidArgument(who + "a chunk of segment " + str(c.segment) +
                           " stops before the last layer: it has no logits to give");
  }
  if (c.segment == 0) {
    if (static_cast<int64_t>(s.tokens.size()) != c.rows) {
      return InvalidArgument(who + "a segment-0 chunk of " + str(c.rows) + " rows brought " +
                             str(s.tokens.size()) + " tokens");
    }
    return OkStatus();
  }
  if (!s.tokens.empty()) {
    return InvalidArgument(who + "a chunk of segment " + str(c.segment) +
                           " starts from boundary rows, not tokens");
  }
  const BoundaryRows& ready = s.cache->boundary().ready;
  if (ready.segment != c.segment || ready.rows() - ready.consumed < c.rows) {
    return InvalidArgument(who + "a chunk of " + str(c.rows) + " rows of segment " +
                           str(c.segment) + " but the cache's boundary holds " +
                           str(ready.rows() - ready.consumed) + " unread rows for segment " +
                           str(ready.segment) + " (run the earlier segment's chunks first)");
  }
  return OkStatus();
}

}  // namespace

Result<PackedBatch> PackedBatch::Build(std::span<const SequenceStep> steps, int vocab, int hidden,
                                       int n_segments) {
  if (steps.empty()) return InvalidArgument("a forward needs at least one request");
  PackedBatch b;
  b.hidden_ = hidden;
  b.n_segments_ = n_segments;
  for (size_t r = 0; r < steps.size(); ++r) {
    const SequenceStep& s = steps[r];
    const std::string who = "request " + std::to_string(r) + ": ";
    if (s.cache == nullptr) return InvalidArgument(who + "no cache");
    if (s.cache->layout().n_segments != n_segments) {
      return InvalidArgument(who + "its cache was made for " +
                             std::to_string(s.cache->layout().n_segments) +
                             " segments but this forward uses " + std::to_string(n_segments) +
                             " (the UniPrefill drop layers changed after the request started)");
    }
    Seq q;
    q.cache = s.cache;
    if (s.chunk != nullptr) {
      UP_RETURN_IF_ERROR(CheckChunk(s, n_segments, who));
      q.enters = s.chunk->segment;
      q.leaves = s.chunk->segment + 1 < n_segments ? s.chunk->segment : -1;
    }
    if (q.enters > 0) {  // rows come from the boundary at d_enters; no new tokens
      q.begin = q.end = b.rows();
      b.seqs_.push_back(q);
      b.added_.push_back(std::vector<int>(n_segments, 0));
      continue;
    }
    if (s.tokens.empty()) return InvalidArgument(who + "a forward needs at least one token");
    const int64_t end = static_cast<int64_t>(s.cache->length()) + s.tokens.size();
    if (end > s.cache->max_tokens()) {
      return OutOfRange(who + "the input has " + std::to_string(end) +
                        " tokens but the context holds " + std::to_string(s.cache->max_tokens()) +
                        "; shorten the prompt or raise --ctx-size");
    }
    for (int32_t id : s.tokens) {
      if (id < 0 || id >= vocab) {
        return InvalidArgument(who + "token id " + std::to_string(id) +
                               " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
      }
    }
    q.begin = b.rows();
    q.new_tokens = static_cast<int>(s.tokens.size());
    const int p0 = s.cache->length(), i0 = s.cache->segment_length(0);
    for (int t = 0; t < q.new_tokens; ++t) {
      b.tokens_.push_back(s.tokens[t]);
      b.pos_.push_back(p0 + t);
      b.index_.push_back(i0 + t);
    }
    q.end = b.rows();
    b.seqs_.push_back(q);
    b.added_.push_back(std::vector<int>(n_segments, 0));
    b.added_.back()[0] = q.new_tokens;
  }
  b.x_ = Buffer(sizeof(float) * static_cast<size_t>(b.rows()) * hidden);
  return b;
}

void PackedBatch::NextSegment(DeviceContext& ctx, const std::vector<std::vector<int32_t>>& keep) {
  const int next = segment_ + 1;
  // The layout is the drop plan's (sparsity/drop_plan.h), as on the GPU.
  std::vector<DropRequest> requests(n_seqs());
  for (int r = 0; r < n_seqs(); ++r) {
    requests[r].rows = requests[r].rows_min = seqs_[r].rows();
    requests[r].next_base = next < n_segments_ ? seqs_[r].cache->segment_length(next) : 0;
  }
  const SegmentLayout layout = PlanExactSegment(requests, keep);
  std::vector<Seq> seqs = seqs_;
  for (int r = 0; r < n_seqs(); ++r) {
    seqs[r].begin = layout.begin[r];
    seqs[r].end = layout.begin[r] + layout.rows[r];
    if (next < n_segments_) added_[r][next] = layout.rows[r];
  }
  std::vector<int32_t> pos(layout.total);
  for (int i = 0; i < layout.total; ++i) pos[i] = pos_[layout.source[i]];
  if (layout.total != rows()) {
    Buffer x(sizeof(float) * layout.total * hidden_);
    ops::GatherRows(ctx, x.View(DType::kF32, {static_cast<int64_t>(layout.total), hidden_}),
                    this->x(), layout.source.data());
    x_ = std::move(x);
  }
  seqs_ = std::move(seqs);
  pos_ = std::move(pos);
  index_ = layout.index;
  segment_ = next;
}

std::vector<int32_t> PackedBatch::KeepLastRows(DeviceContext& ctx) {
  std::vector<int32_t> rows;
  std::vector<int32_t> pos, index;
  for (Seq& q : seqs_) {
    const bool any = q.rows() > 0;
    const int last = q.end - 1;
    q.begin = static_cast<int>(rows.size());
    if (any) {
      rows.push_back(last);
      pos.push_back(pos_[last]);
      index.push_back(index_[last]);
    }
    q.end = static_cast<int>(rows.size());
  }
  Buffer x(sizeof(float) * std::max<size_t>(1, rows.size() * hidden_));
  if (!rows.empty() && hidden_ > 0) {
    ops::GatherRows(
        ctx,
        TensorView::Contiguous(x.data(), DType::kF32, {static_cast<int64_t>(rows.size()), hidden_}),
        this->x(), rows.data());
  }
  x_ = std::move(x);
  pos_ = std::move(pos);
  index_ = std::move(index);
  return rows;
}

bool PackedBatch::Exchanges(int segment) const {
  for (const Seq& q : seqs_) {
    if ((q.enters == segment && segment > 0) || (q.leaves >= 0 && q.leaves + 1 == segment)) {
      return true;
    }
  }
  return false;
}

void PackedBatch::Exchange(std::span<const EnteringRows> enter) {
  std::vector<Seq> seqs = seqs_;
  std::vector<int32_t> pos, index;
  int total = 0;
  for (int r = 0; r < n_seqs(); ++r) {
    Seq& q = seqs[r];
    const bool leaves = q.leaves >= 0 && q.leaves + 1 == segment_;
    const bool enters = r < static_cast<int>(enter.size()) && enter[r].x != nullptr;
    const int n = leaves ? 0 : enters ? static_cast<int>(enter[r].pos.size()) : q.rows();
    if (leaves && segment_ < n_segments_) added_[r][segment_] = 0;  // its rows went elsewhere
    if (enters) {
      added_[r][segment_] = n;
      const int base = q.cache->segment_length(segment_);
      for (int i = 0; i < n; ++i) {
        pos.push_back(enter[r].pos[i]);
        index.push_back(base + i);
      }
    } else if (!leaves) {
      pos.insert(pos.end(), pos_.begin() + q.begin, pos_.begin() + q.end);
      index.insert(index.end(), index_.begin() + q.begin, index_.begin() + q.end);
    }
    q.begin = total;
    q.end = total + n;
    total += n;
  }
  Buffer x(sizeof(float) * std::max<size_t>(1, static_cast<size_t>(total) * hidden_));
  const size_t row_bytes = sizeof(float) * hidden_;
  for (int r = 0; r < n_seqs(); ++r) {
    const float* from = r < static_cast<int>(enter.size()) && enter[r].x
                            ? enter[r].x
                            : x_.as<float>() + static_cast<size_t>(seqs_[r].begin) * hidden_;
    if (seqs[r].rows() > 0 && hidden_ > 0) {
      std::memcpy(x.as<float>() + static_cast<size_t>(seqs[r].begin) * hidden_, from,
                  row_bytes * seqs[r].rows());
    }
  }
  x_ = std::move(x);
  seqs_ = std::move(seqs);
  pos_ = std::move(pos);
  index_ = std::move(index);
}

void PackedBatch::Commit() {
  for (int r = 0; r < n_seqs(); ++r) seqs_[r].cache->Commit(seqs_[r].new_tokens, added_[r]);
}

}  // namespace uniprefill
