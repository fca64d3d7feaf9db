// SequenceRows: which rows of a packed batch belong to one sequence.
//
// A packed batch stacks several sequences' rows into one f32 [T, H] activation; sequence s owns
// rows [begin, end). GEMMs run over all T rows at once; recurrences (conv, delta rule) and
// attention run per sequence on its own rows. Ranges are disjoint and in row order.
#pragma once

namespace uniprefill {

struct SequenceRows {
  int begin = 0;
  int end = 0;  // exclusive
  int size() const { return end - begin; }
};

}  // namespace uniprefill
