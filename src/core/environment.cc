#include "core/environment.h"

#include <unistd.h>

namespace uniprefill {

std::map<std::string, std::string> EnvironmentWithPrefix(std::string_view prefix) {
  std::map<std::string, std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos || !entry.substr(0, eq).starts_with(prefix)) continue;
    out.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return out;
}

}  // namespace uniprefill
