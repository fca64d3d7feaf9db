// Which CPU kernel variant runs for each op and weight type at an ISA level: the text
// `uniprefill info` prints under "cpu kernels", so a user can see what --cpu-isa changes.
#pragma once

#include <string>

#include "core/cpu_isa.h"

namespace uniprefill::ops::cpu {

// A small table, one line per weight type ("  Q4_K   avx512  avx512-vnni"), then the other ops;
// for a resolved level.
std::string DescribeCpuKernelPaths(CpuIsa isa);

}  // namespace uniprefill::ops::cpu
