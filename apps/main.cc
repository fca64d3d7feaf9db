// The `uniprefill` command line: run (and later serve, bench, eval).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "bench_gpu_decode_command.h"
#include "bench_gpu_prefill_command.h"
#include "bench_prefill_command.h"
#include "bench_serve_command.h"
#include "bench_step_command.h"
#include "calibrate_command.h"
#include "eval_fidelity_command.h"
#include "eval_qa_command.h"
#include "eval_ruler_command.h"
#include "info_command.h"
#include "run_command.h"
#include "serve_command.h"

#include "core/openblas_core.h"

int main(int argc, char** argv) {
  // First, before any thread or output: may restart this program with OPENBLAS_CORETYPE set.
  uniprefill::RestartIfOpenBlasChoseGenericKernels(argv);
  CLI::App app{
      "uniprefill: a long-context LLM inference engine (UniPrefill prefill acceleration).\n"
      "Loads a GGUF model (default: Gemma 3 270M installed by scripts/setup.sh) and runs it on "
      "the CPU."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "uniprefill 0.1.0");
  uniprefill::cli::RunOptions run;
  uniprefill::cli::AddRunCommand(app, run);
  uniprefill::cli::InfoOptions info;
  uniprefill::cli::AddInfoCommand(app, info);
  uniprefill::cli::BenchPrefillOptions bench;
  uniprefill::cli::AddBenchPrefillCommand(app, bench);
  CLI::App* eval = app.add_subcommand("eval", "Accuracy of UniPrefill against dense");
  eval->require_subcommand(1);
  uniprefill::cli::EvalFidelityOptions fidelity;
  CLI::App* fidelity_cmd = uniprefill::cli::AddEvalFidelityCommand(*eval, fidelity);
  uniprefill::cli::EvalRulerOptions ruler;
  CLI::App* ruler_cmd = uniprefill::cli::AddEvalRulerCommand(*eval, ruler);
  uniprefill::cli::EvalQaOptions qa;
  CLI::App* qa_cmd = uniprefill::cli::AddEvalQaCommand(*eval, qa);
  uniprefill::cli::CalibrateOptions calibrate;
  uniprefill::cli::AddCalibrateCommand(app, calibrate);
  uniprefill::cli::ServeOptions serve;
  uniprefill::cli::AddServeCommand(app, serve);
  CLI::App* bench_group = app.add_subcommand(
      "bench", "Benchmarks: a running server, GPU prefill and decode, one forward's mix of work");
  bench_group->require_subcommand(1);
  uniprefill::cli::BenchServeOptions bench_serve;
  CLI::App* bench_serve_cmd = uniprefill::cli::AddBenchServeCommand(*bench_group, bench_serve);
  uniprefill::cli::BenchGpuPrefillOptions bench_gpu;
  CLI::App* bench_gpu_cmd = uniprefill::cli::AddBenchGpuPrefillCommand(*bench_group, bench_gpu);
  uniprefill::cli::BenchGpuDecodeOptions bench_gpu_decode;
  CLI::App* bench_gpu_decode_cmd =
      uniprefill::cli::AddBenchGpuDecodeCommand(*bench_group, bench_gpu_decode);
  uniprefill::cli::BenchStepOptions bench_step;
  CLI::App* bench_step_cmd = uniprefill::cli::AddBenchStepCommand(*bench_group, bench_step);
  bool known = false;
  for (const CLI::App* sub : app.get_subcommands({})) known |= argc > 1 && sub->get_name() == argv[1];
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::fprintf(stderr, "error: unknown command '%s' (commands: run, serve, info, bench-prefill, bench, eval, calibrate; see 'uniprefill --help')\n",
                 argv[1]);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s (see 'uniprefill %s--help')\n", e.what(),
                 app.get_subcommands().empty() ? "" : (app.get_subcommands()[0]->get_name() + " ").c_str());
    return 2;
  }
  if (app.got_subcommand("run")) return uniprefill::cli::RunCommand(run);
  if (app.got_subcommand("info")) return uniprefill::cli::InfoCommand(info);
  if (app.got_subcommand("bench-prefill")) return uniprefill::cli::BenchPrefillCommand(bench);
  if (fidelity_cmd->parsed()) return uniprefill::cli::EvalFidelityCommand(fidelity);
  if (ruler_cmd->parsed()) return uniprefill::cli::EvalRulerCommand(ruler);
  if (qa_cmd->parsed()) return uniprefill::cli::EvalQaCommand(qa);
  if (app.got_subcommand("calibrate")) return uniprefill::cli::CalibrateCommand(calibrate);
  if (app.got_subcommand("serve")) return uniprefill::cli::ServeCommand(serve);
  if (bench_serve_cmd->parsed()) return uniprefill::cli::BenchServeCommand(bench_serve);
  if (bench_gpu_cmd->parsed()) return uniprefill::cli::BenchGpuPrefillCommand(bench_gpu);
  if (bench_gpu_decode_cmd->parsed()) {
    return uniprefill::cli::BenchGpuDecodeCommand(bench_gpu_decode);
  }
  if (bench_step_cmd->parsed()) return uniprefill::cli::BenchStepCommand(bench_step);
  return 2;
}
