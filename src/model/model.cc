#include "model/model.h"

#include "io/gguf.h"
#include "model/gemma3.h"

namespace uniprefill {

Result<std::unique_ptr<Model>> LoadModel(const std::string& path, DeviceContext& ctx,
                                         const LoadOptions& options) {
  UP_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
  return LoadModel(std::move(file), ctx, options);
}

Result<std::unique_ptr<Model>> LoadModel(std::unique_ptr<gguf::GgufFile> file, DeviceContext& ctx,
                                         const LoadOptions& options) {
  const std::string path = file->path();
  auto arch = file->GetString("general.architecture");
  if (!arch.ok()) {
    return DataLoss("model file " + path + " has no general.architecture key; is it a GGUF model?");
  }
  if (*arch == "gemma3") return LoadGemma3(std::move(file), ctx, options);
  return Unimplemented("model file " + path + " has architecture '" + *arch +
                       "', which this engine does not support yet (supported: gemma3)");
}

}  // namespace uniprefill
