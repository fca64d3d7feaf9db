#include "info_command.h"

#include <cstdio>
#include <map>

#include "core/cpu_isa.h"
#include "core/openblas_core.h"
#include "io/gguf.h"
#include "model_names.h"
#include "ops/cpu/cpu_kernel_paths.h"
#include "run_command.h"
#include "uniprefill_flags.h"

namespace uniprefill::cli {

void AddInfoCommand(CLI::App& app, InfoOptions& o) {
  CLI::App* info = app.add_subcommand("info", "Describe a GGUF model file (metadata, tensors)");
  o.model = DefaultModelPath();
  info->add_option("-m,--model", o.model,
                   "GGUF model file, or a short name of one in models/ (" + KnownModelNames() + ")")
      ->capture_default_str();
  info->add_flag("--tensors", o.tensors, "List every tensor");
  AddCpuIsaFlag(*info, o.cpu_isa);
}

namespace {

// The CPU section: features, the level `requested` resolves to, and its kernels; false (after
// printing the error) when the level cannot run here.
bool PrintCpu(const std::string& requested) {
  const CpuFeatures& features = DetectCpuFeatures();
  std::printf("cpu features: %s\n", DescribeCpuFeatures(features).c_str());
  Result<CpuIsa> isa = ParseCpuIsa(requested);
  if (isa.ok()) isa = ResolveCpuIsa(*isa, features);
  if (!isa.ok()) {
    std::fprintf(stderr, "error: %s\n", isa.status().message().c_str());
    return false;
  }
  std::printf("cpu isa: %s (requested %s; best here %s)\n", std::string(CpuIsaName(*isa)).c_str(),
              requested.c_str(), std::string(CpuIsaName(BestCpuIsa(features))).c_str());
  std::printf("cpu kernels:\n%s", ops::cpu::DescribeCpuKernelPaths(*isa).c_str());
  const OpenBlasCore blas = DescribeOpenBlasCore(features);
  std::printf("openblas: %s; kernels %s", blas.config.c_str(), blas.running.c_str());
  if (!blas.note.empty()) std::printf(" (%s)", blas.note.c_str());
  std::printf("\n");
  return true;
}

}  // namespace

int InfoCommand(const InfoOptions& o) {
  if (!PrintCpu(o.cpu_isa)) return 1;
  const std::string path = ResolveModelArgument(o.model);
  auto file = gguf::GgufFile::Open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "error: %s\n", file.status().message().c_str());
    return 1;
  }
  const gguf::GgufFile& f = **file;
  std::printf("file: %s (%zu bytes, GGUF v%u, alignment %u)\n", path.c_str(), f.file_size(),
              f.version(), f.alignment());
  for (const auto& [key, value] : f.metadata()) {
    std::printf("  %-48s ", key.c_str());
    if (auto* s = std::get_if<std::string>(&value.data)) {
      std::printf("%s\n", s->size() > 80 ? (s->substr(0, 77) + "...").c_str() : s->c_str());
    } else if (auto* a = std::get_if<gguf::Array>(&value.data)) {
      std::printf("[%zu x %s]\n", a->elements.size(), gguf::ValueTypeName(a->element_type));
    } else if (auto* u = std::get_if<uint64_t>(&value.data)) {
      std::printf("%llu\n", static_cast<unsigned long long>(*u));
    } else if (auto* i = std::get_if<int64_t>(&value.data)) {
      std::printf("%lld\n", static_cast<long long>(*i));
    } else if (auto* d = std::get_if<double>(&value.data)) {
      std::printf("%g\n", *d);
    } else if (auto* b = std::get_if<bool>(&value.data)) {
      std::printf("%s\n", *b ? "true" : "false");
    }
  }
  std::map<std::string, int> by_type;
  for (const auto& t : f.tensors()) by_type[DTypeName(t.type)]++;
  std::printf("tensors: %zu (", f.tensors().size());
  bool first = true;
  for (auto& [name, n] : by_type) {
    std::printf("%s%s x%d", first ? "" : ", ", name.c_str(), n);
    first = false;
  }
  std::printf(")\n");
  if (o.tensors) {
    for (const auto& t : f.tensors()) {
      std::printf("  %-40s %-5s %s\n", t.name.c_str(), DTypeName(t.type),
                  t.View().ShapeString().c_str());
    }
  }
  return 0;
}

}  // namespace uniprefill::cli
