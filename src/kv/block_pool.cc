#include "kv/block_pool.h"

#include <string>

namespace uniprefill {

BlockPool::BlockPool(int num_blocks) {
  const int n = num_blocks > 0 ? num_blocks : 0;
  used_.assign(n, 0);
  free_.reserve(n);
  for (int b = n - 1; b >= 0; --b) free_.push_back(b);  // block 0 on top
}

std::optional<int> BlockPool::Allocate() {
  if (free_.empty()) return std::nullopt;
  const int b = free_.back();
  free_.pop_back();
  used_[b] = 1;
  return b;
}

Status BlockPool::Free(int block) {
  if (block < 0 || block >= num_blocks()) {
    return InvalidArgument("block " + std::to_string(block) + " is not in the pool of " +
                           std::to_string(num_blocks()) + " blocks");
  }
  if (!used_[block]) {
    return InvalidArgument("block " + std::to_string(block) + " is already free (double free)");
  }
  used_[block] = 0;
  free_.push_back(block);
  return OkStatus();
}

bool BlockPool::is_used(int block) const {
  return block >= 0 && block < num_blocks() && used_[block] != 0;
}

}  // namespace uniprefill
