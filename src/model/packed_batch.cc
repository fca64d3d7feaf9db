#include "model/packed_batch.h"

#include <string>

#include "ops/ops.h"

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
  std::vector<int32_t> rows;  // absolute rows kept, in order
  std::vector<Seq> seqs = seqs_;
  for (int r = 0; r < n_seqs(); ++r) {
    Seq& q = seqs[r];
    const int begin = static_cast<int>(rows.size());
    if (r < static_cast<int>(keep.size()) && !keep[r].empty()) {
      for (int32_t i : keep[r]) rows.push_back(seqs_[r].begin + i);
    } else {
      for (int i = seqs_[r].begin; i < seqs_[r].end; ++i) rows.push_back(i);
    }
    q.begin = begin;
    q.end = static_cast<int>(rows.size());
  }
  if (next < n_segments_) {
    for (int r = 0; r < n_seqs(); ++r) added_[r][next] = seqs[r].rows();
  }
  std::vector<int32_t> pos(rows.size()), index(rows.size());
  for (int r = 0; r < n_seqs(); ++r) {
    const int i0 = next < n_segments_ ? seqs[r].cache->segment_length(next) : 0;
    for (int i = seqs[r].begin; i < seqs[r].end; ++i) {
      pos[i] = pos_[rows[i]];
      index[i] = i0 + (i - seqs[r].begin);
    }
  }
  if (static_cast<int>(rows.size()) != this->rows()) {
    Buffer x(sizeof(float) * rows.size() * hidden_);
    ops::GatherRows(ctx, x.View(DType::kF32, {static_cast<int64_t>(rows.size()), hidden_}), this->x(),
                    rows.data());
    x_ = std::move(x);
  }
  seqs_ = std::move(seqs);
  pos_ = std::move(pos);
  index_ = std::move(index);
  segment_ = next;
}

void PackedBatch::Commit() {
  for (int r = 0; r < n_seqs(); ++r) seqs_[r].cache->Commit(seqs_[r].new_tokens, added_[r]);
}

}  // namespace uniprefill
