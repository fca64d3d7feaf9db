#include "kv/block_extents.h"

#include <iterator>
#include <string>

namespace uniprefill {

void BlockExtents::Insert(int first, int count) {
  by_first_.emplace(first, count);
  by_size_.emplace(count, first);
  free_ += count;
}

void BlockExtents::Erase(std::map<int, int>::iterator it) {
  by_size_.erase({it->second, it->first});
  free_ -= it->second;
  by_first_.erase(it);
}

void BlockExtents::Grow(int num_blocks) {
  if (num_blocks <= num_blocks_) return;
  const int old = num_blocks_;
  num_blocks_ = num_blocks;
  (void)Free(old, num_blocks - old);  // the new ids were never free: merges with a free tail
}

int BlockExtents::longest_run() const {
  return by_size_.empty() ? 0 : by_size_.rbegin()->first;
}

int BlockExtents::TakeOne() {
  if (by_first_.empty()) return -1;
  auto it = by_first_.begin();
  const int first = it->first, count = it->second;
  Erase(it);
  if (count > 1) Insert(first + 1, count - 1);
  return first;
}

int BlockExtents::TakeRun(int count) {
  if (count < 1) return -1;
  const auto fit = by_size_.lower_bound({count, -1});
  if (fit == by_size_.end()) return -1;
  const int first = fit->second, length = fit->first;
  Erase(by_first_.find(first));
  if (length > count) Insert(first + count, length - count);
  return first;
}

Status BlockExtents::Free(int first, int count) {
  if (count < 1 || first < 0 || first > num_blocks_ - count) {
    return InvalidArgument("BlockExtents::Free: ids [" + std::to_string(first) + ", " +
                           std::to_string(first + count) + ") are not all in [0, " +
                           std::to_string(num_blocks_) + ")");
  }
  // No free extent may overlap [first, first + count).
  auto next = by_first_.lower_bound(first);
  if (next != by_first_.end() && next->first < first + count) {
    return InvalidArgument("BlockExtents::Free: block " + std::to_string(next->first) +
                           " is already free");
  }
  if (next != by_first_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > first) {
      return InvalidArgument("BlockExtents::Free: block " + std::to_string(first) +
                             " is already free");
    }
  }
  int merged_first = first, merged_count = count;
  if (next != by_first_.end() && next->first == first + count) {
    merged_count += next->second;
    Erase(next);
  }
  auto after = by_first_.lower_bound(first);
  if (after != by_first_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == first) {
      merged_first = prev->first;
      merged_count += prev->second;
      Erase(prev);
    }
  }
  Insert(merged_first, merged_count);
  return OkStatus();
}

}  // namespace uniprefill
