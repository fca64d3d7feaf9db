#include "model/packed_batch.h"

#include <string>

#include "ops/ops.h"
#include "sparsity/drop_plan.h"

namespace uniprefill {

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
    if (s.tokens.empty()) return InvalidArgument(who + "a forward needs at least one token");
    if (s.cache->layout().n_segments != n_segments) {
      return InvalidArgument(who + "its cache was made for " +
                             std::to_string(s.cache->layout().n_segments) +
                             " segments but this forward uses " + std::to_string(n_segments) +
                             " (the UniPrefill drop layers changed after the request started)");
    }
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
    Seq q;
    q.begin = b.rows();
    q.cache = s.cache;
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

void PackedBatch::Commit() {
  for (int r = 0; r < n_seqs(); ++r) seqs_[r].cache->Commit(seqs_[r].new_tokens, added_[r]);
}

}  // namespace uniprefill
