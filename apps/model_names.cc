#include "model_names.h"

#include <filesystem>
#include <string_view>

namespace uniprefill::cli {
namespace {

struct KnownModel {
  std::string_view name;   // what --model accepts
  std::string_view file;   // under models/, as scripts/setup.sh names it
};

// The first name of each file is the one help texts show.
constexpr KnownModel kKnownModels[] = {
    {"gemma3-270m", "gemma-3-270m-q4_k_m.gguf"},
    {"gemma-3-270m-q4_k_m", "gemma-3-270m-q4_k_m.gguf"},
    {"smollm2", "smollm2-135m-instruct-q4_1.gguf"},
    {"smollm2-135m-instruct-q4_1", "smollm2-135m-instruct-q4_1.gguf"},
};

}  // namespace

std::string ResolveModelArgument(const std::string& argument) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(argument, ec)) return argument;
  for (const KnownModel& m : kKnownModels) {
    if (m.name != argument) continue;
    const fs::path source_models = fs::path(UP_SOURCE_DIR) / "models" / m.file;
    if (fs::exists(source_models, ec)) return source_models.string();
    return (fs::path("models") / m.file).string();
  }
  return argument;
}

std::string KnownModelNames() {
  std::string out;
  std::string_view last_file;
  for (const KnownModel& m : kKnownModels) {
    if (m.file == last_file) continue;
    last_file = m.file;
    out += (out.empty() ? "" : ", ") + std::string(m.name);
  }
  return out;
}

}  // namespace uniprefill::cli
