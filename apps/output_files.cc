#include "output_files.h"

#include <cstdio>
#include <fstream>

namespace uniprefill::cli {

bool CheckOutputWritable(const std::string& path, const std::string& flag) {
  if (path.empty()) return true;
  std::ofstream probe(path, std::ios::app);
  if (!probe) {
    std::fprintf(stderr, "error: cannot write %s '%s' (does its folder exist?)\n", flag.c_str(),
                 path.c_str());
    return false;
  }
  return true;
}

bool WriteJsonFile(const std::string& path, const nlohmann::json& j, const std::string& flag) {
  std::ofstream out(path);
  out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  if (!out) {
    std::fprintf(stderr, "error: cannot write %s '%s'\n", flag.c_str(), path.c_str());
    return false;
  }
  return true;
}

}  // namespace uniprefill::cli
