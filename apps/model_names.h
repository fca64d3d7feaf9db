// Short names for --model: each stands for a model file that scripts/setup.sh installs under the
// source tree's models/ folder, so `uniprefill run --model smollm2` needs no path.
// Non-goals: downloading models, or searching anywhere but models/ (the source tree's, then ./).
#pragma once

#include <string>

namespace uniprefill::cli {

// What --model means: an existing file or folder as given; otherwise, for a known short name
// (gemma3-270m, smollm2, and the installed files' stems), the path of its file under models/;
// otherwise the argument unchanged, so the load error names what the user typed.
std::string ResolveModelArgument(const std::string& argument);

// "gemma3-270m, smollm2": for help texts.
std::string KnownModelNames();

}  // namespace uniprefill::cli
