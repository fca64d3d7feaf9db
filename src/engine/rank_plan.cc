// RankPlan's wire format and its broadcast (rank_plan.h).
#include "engine/rank_plan.h"

#include <cstring>
#include <string>
#include <type_traits>

namespace uniprefill {
namespace {

// Appends trivially copyable values and arrays of them.
class PlanWriter {
 public:
  template <typename T>
  void Put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  template <typename T>
  void PutArray(const std::vector<T>& v) {
    Put(static_cast<uint64_t>(v.size()));
    for (const T& x : v) Put(x);
  }
  std::vector<uint8_t> Take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

// Reads what PlanWriter wrote; the first failure sticks and names the field it was reading.
class PlanReader {
 public:
  explicit PlanReader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}

  template <typename T>
  void Get(T& v, const char* what) {
    if (!status_.ok()) return;
    if (bytes_.size() - at_ < sizeof(T)) {
      status_ = DataLoss("step plan truncated at " + std::string(what) + " (byte " +
                         std::to_string(at_) + " of " + std::to_string(bytes_.size()) + ")");
      return;
    }
    std::memcpy(&v, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
  }
  template <typename T>
  void GetArray(std::vector<T>& v, const char* what) {
    uint64_t n = 0;
    Get(n, what);
    if (!status_.ok()) return;
    if (n > (bytes_.size() - at_) / sizeof(T)) {
      status_ = DataLoss("step plan: " + std::string(what) + " claims " + std::to_string(n) +
                         " entries, more than the bytes left");
      return;
    }
    v.resize(n);
    for (T& x : v) Get(x, what);
  }
  // How many records of at least `min_bytes` may follow (a bound against absurd counts).
  uint64_t Room(uint64_t min_bytes) const { return (bytes_.size() - at_) / min_bytes; }
  bool done() const { return at_ == bytes_.size(); }
  size_t at() const { return at_; }
  const Status& status() const { return status_; }
  void Fail(Status s) {
    if (status_.ok()) status_ = std::move(s);
  }

 private:
  const std::vector<uint8_t>& bytes_;
  size_t at_ = 0;
  Status status_;
};

// Flags of a request, one bit each.
enum : uint8_t { kPrefill = 1, kLastChunk = 2, kAllowDrop = 4, kSelectionOn = 8 };

void PutRequest(PlanWriter& w, const RankPlanRequest& r) {
  w.Put(r.id);
  w.Put(static_cast<uint8_t>((r.is_prefill ? kPrefill : 0) | (r.last_chunk ? kLastChunk : 0) |
                             (r.allow_drop ? kAllowDrop : 0) |
                             (r.selection_enabled ? kSelectionOn : 0)));
  w.Put(r.reserve_tokens);
  w.Put(r.num_tokens);
  w.Put(r.chunk_begin);
  w.Put(r.segment);
  w.Put(r.segment_rows);
  const sparsity::SelectionParams& s = r.selection;
  w.Put(static_cast<int32_t>(s.block_size));
  w.Put(static_cast<int32_t>(s.sink));
  w.Put(static_cast<int32_t>(s.last_n));
  w.Put(static_cast<uint8_t>(s.mode));
  w.Put(s.top_p);
  w.Put(s.keep_ratio);
  w.PutArray(r.tokens);
}

void GetRequest(PlanReader& in, RankPlanRequest& r) {
  in.Get(r.id, "request id");
  uint8_t flags = 0;
  in.Get(flags, "request flags");
  r.is_prefill = flags & kPrefill;
  r.last_chunk = flags & kLastChunk;
  r.allow_drop = flags & kAllowDrop;
  r.selection_enabled = flags & kSelectionOn;
  in.Get(r.reserve_tokens, "reserve_tokens");
  in.Get(r.num_tokens, "num_tokens");
  in.Get(r.chunk_begin, "chunk_begin");
  in.Get(r.segment, "segment");
  in.Get(r.segment_rows, "segment_rows");
  int32_t block = 0, sink = 0, last_n = 0;
  uint8_t mode = 0;
  in.Get(block, "block_size");
  in.Get(sink, "sink");
  in.Get(last_n, "last_n");
  in.Get(mode, "selection mode");
  in.Get(r.selection.top_p, "top_p");
  in.Get(r.selection.keep_ratio, "keep_ratio");
  r.selection.block_size = block;
  r.selection.sink = sink;
  r.selection.last_n = last_n;
  if (mode > static_cast<uint8_t>(sparsity::SelectionMode::kFixedRatio)) {
    in.Fail(DataLoss("step plan: unknown selection mode " + std::to_string(mode)));
  }
  r.selection.mode = static_cast<sparsity::SelectionMode>(mode);
  in.GetArray(r.tokens, "tokens");
}

// The smallest encoded request (no tokens): a bound for the request count.
constexpr uint64_t kMinRequestBytes = 8 + 1 + 4 * 5 + 4 * 3 + 1 + 4 * 2 + 8;

}  // namespace

std::vector<uint8_t> EncodeRankPlan(const RankPlan& plan) {
  PlanWriter w;
  w.Put(static_cast<uint8_t>(plan.kind));
  w.PutArray(plan.released);
  w.Put(static_cast<uint64_t>(plan.requests.size()));
  for (const RankPlanRequest& r : plan.requests) PutRequest(w, r);
  return w.Take();
}

Result<RankPlan> DecodeRankPlan(const std::vector<uint8_t>& bytes) {
  PlanReader in(bytes);
  RankPlan plan;
  uint8_t kind = 0;
  in.Get(kind, "kind");
  if (in.status().ok() && (kind < static_cast<uint8_t>(RankPlanKind::kStep) ||
                           kind > static_cast<uint8_t>(RankPlanKind::kShutdown))) {
    return DataLoss("step plan of unknown kind " + std::to_string(kind));
  }
  plan.kind = static_cast<RankPlanKind>(kind);
  in.GetArray(plan.released, "released");
  uint64_t n = 0;
  in.Get(n, "request count");
  if (in.status().ok() && n > in.Room(kMinRequestBytes)) {
    return DataLoss("step plan claims " + std::to_string(n) + " requests in " +
                    std::to_string(bytes.size()) + " bytes");
  }
  plan.requests.resize(in.status().ok() ? n : 0);
  for (RankPlanRequest& r : plan.requests) GetRequest(in, r);
  UP_RETURN_IF_ERROR(in.status());
  if (!in.done()) {
    return DataLoss("step plan has " + std::to_string(bytes.size() - in.at()) +
                    " bytes after its last request");
  }
  return plan;
}

Status SendRankPlan(dist::Communicator& comm, const RankPlan& plan) {
  std::vector<uint8_t> bytes = EncodeRankPlan(plan);
  uint64_t length = bytes.size();
  UP_RETURN_IF_ERROR(comm.Broadcast(&length, sizeof(length), 0));
  return comm.Broadcast(bytes.data(), static_cast<int64_t>(length), 0);
}

Result<RankPlan> ReceiveRankPlan(dist::Communicator& comm) {
  uint64_t length = 0;
  UP_RETURN_IF_ERROR(comm.Broadcast(&length, sizeof(length), 0));
  // Plans hold ids and this step's tokens: far below this bound unless the length is garbage.
  if (length > (uint64_t{1} << 32)) {
    return DataLoss("step plan of " + std::to_string(length) + " bytes from rank 0");
  }
  std::vector<uint8_t> bytes(length);
  UP_RETURN_IF_ERROR(comm.Broadcast(bytes.data(), static_cast<int64_t>(length), 0));
  return DecodeRankPlan(bytes);
}

}  // namespace uniprefill
