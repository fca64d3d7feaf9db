// The process environment's variables whose names start with a prefix: what a benchmark records
// beside its figures so that a result says which diagnostics and launch choices it ran with
// (UNIPREFILL_*: backend/cuda/cuda_diagnostics.h, core/cpu_isa.h), since two runs of one binary
// can differ by nothing else.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace uniprefill {

// name -> value of every variable of the environment whose name starts with `prefix`.
std::map<std::string, std::string> EnvironmentWithPrefix(std::string_view prefix);

}  // namespace uniprefill
