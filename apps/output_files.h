// Checks, before hours of evaluation, that the files a command will write can be written.
#pragma once

#include <string>

namespace uniprefill::cli {

// True when `path` is empty (no file asked for) or can be opened for writing; otherwise prints
// one `error:` line naming `flag` and the path. Creates the file (empty) if it did not exist.
bool CheckOutputWritable(const std::string& path, const std::string& flag);

}  // namespace uniprefill::cli
