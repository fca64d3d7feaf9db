// The files commands write: checked before hours of evaluation, then written in one place.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "uniprefill/engine.h"

namespace uniprefill::cli {

// Tensor parallel: every rank runs the command and computes the same numbers; rank 0 alone writes
// the report files (and stdout: the other ranks' goes to /dev/null).
inline bool OwnsReports(const Engine& engine) { return engine.tensor_parallel_rank() == 0; }

// True when `path` is empty (no file asked for) or can be opened for writing; otherwise prints
// one `error:` line naming `flag` and the path. Creates the file (empty) if it did not exist.
bool CheckOutputWritable(const std::string& path, const std::string& flag);

// Writes `j` indented to `path` (invalid UTF-8 in generated text becomes U+FFFD rather than an
// exception); false after one `error:` line naming `flag` when the file cannot be written.
bool WriteJsonFile(const std::string& path, const nlohmann::json& j, const std::string& flag);

}  // namespace uniprefill::cli
