// experiments/main.cpp — the asgdsim command line. Parses arguments, turns exceptions into
// exit codes (0 done, 2 invalid input, 1 other failure, 130 interrupted). Nothing below
// main calls exit().
#include <csignal>
#include <filesystem>
#include <iostream>
#include <boost/program_options.hpp>
#include <unistd.h>
#include "asgd/build_info.h"
#include "engines/engine_registry.h"
#include "experiments/config.h"
#include "experiments/runner.h"
#include "sim/atomic_file.h"
#include "sim/distribution.h"
#include "sim/idx_reader.h"
#include "sim/interrupt.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace asgd;

namespace {

constexpr const char* kUsage =
    "usage:\n"
    "  asgdsim run CONFIG.json [--set KEY.PATH=VALUE]... [--out DIR] [--threads N] [--jobs N] [--force] [--quiet] [--trace]\n"
    "  asgdsim validate CONFIG.json [--set KEY.PATH=VALUE]...\n"
    "  asgdsim list\n"
    "exit codes: 0 done, 2 invalid input, 1 other failure, 130 interrupted\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void on_signal(int) {
  if (interrupt_count().fetch_add(1) >= 1) _exit(130);  // second signal: leave now
}

Experiment load_experiment(const std::string& path, const std::vector<std::string>& sets) {
  json cfg = load_json_file(path);
  apply_overrides(cfg, sets, path);
  if (cfg.is_object() && !cfg.contains("name")) cfg["name"] = fs::path(path).stem().string();
  std::string base = fs::path(path).parent_path().string();
  Experiment exp = resolve_experiment(cfg, path, base.empty() ? "." : base);
  if (!sets.empty()) exp.resolved["overrides"] = sets;
  return exp;
}

void print_params(const std::vector<ParamInfo>& params, const std::string& indent) {
  for (const auto& p : params) {
    std::cout << indent << p.name << " (" << describe_allowed(p) << ", "
              << (p.required() ? std::string("required") : "default " + p.default_value.dump()) << "): " << p.doc << "\n";
  }
}

void print_components(const std::string& title, const std::string& key, const std::vector<ComponentInfo>& cat) {
  std::cout << "\n" << title << " (" << key << "):\n";
  for (const auto& c : cat) {
    std::cout << "  " << c.name << " — " << c.doc << "\n";
    print_params(c.params, "      ");
  }
}

int cmd_list() {
  std::cout << "asgdsim " << build::version << " (backend " << build::backend << ")\n";
  for (const auto& s : section_catalog()) {
    std::cout << "\n" << (s.name == "top" ? std::string("top level") : s.name) << " — " << s.doc << ":\n";
    print_params(s.params, "    ");
  }
  print_components("engines", "engines[].type", engine_catalog());
  print_components("models", "model.type", model_catalog());
  print_components("datasets", "data.type", data_catalog());
  print_components("distributions", "cluster.compute.dist", distribution_catalog());
  print_components("staleness modes", "staleness.mode", staleness_catalog());
  print_components("learning-rate schedules", "train.lr_schedule.type", lr_schedule_catalog());
  return 0;
}

int cmd_validate(const Experiment& exp) {
  std::cout << exp.runs.size() << " run(s) for experiment '" << exp.resolved.value("name", "") << "':\n";
  for (const auto& r : exp.runs) {
    std::cout << "  " << r.run_id << "  engine=" << r.engine;
    for (const auto& [k, v] : r.sweep_values.items()) std::cout << " " << k << "=" << v.dump();
    std::cout << " seed=" << r.seed << "\n";
  }
  return 0;
}

int dispatch(int argc, char** argv) {
  if (argc < 2) throw UsageError("missing command");
  std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (cmd == "--version") {
    std::cout << "asgdsim " << build::version << " " << build::git_commit << (build::git_dirty ? "-dirty" : "")
              << " backend " << build::backend << "\n";
    return 0;
  }
  if (cmd == "list") return cmd_list();
  if (cmd != "run" && cmd != "validate") throw UsageError("unknown command '" + cmd + "'");

  po::options_description opts("options");
  std::vector<std::string> sets;
  RunnerOptions ro;
  opts.add_options()
      ("config", po::value<std::string>(), "experiment config (JSON)")
      ("set", po::value<std::vector<std::string>>(&sets)->composing(), "override KEY.PATH=VALUE")
      ("out", po::value<std::string>(&ro.out_dir)->default_value("runs"), "output folder")
      ("threads", po::value<int>(&ro.threads)->default_value(0), "worker threads (0 = cores)")
      ("jobs", po::value<int>(&ro.jobs)->default_value(1), "runs side by side, each with threads/N threads")
      ("force", po::bool_switch(&ro.force), "re-run completed runs, overwrite other configs' folders")
      ("quiet", po::bool_switch(&ro.quiet), "no progress or per-run lines")
      ("trace", po::bool_switch(&ro.trace), "write trace.json for every run");
  po::positional_options_description pos;
  pos.add("config", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc - 1, argv + 1).options(opts).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  if (!vm.count("config")) throw UsageError("missing CONFIG.json");
  if (ro.threads < 0) throw UsageError("--threads must be >= 0");
  if (ro.jobs < 1) throw UsageError("--jobs must be >= 1");
  Experiment exp = load_experiment(vm["config"].as<std::string>(), sets);
  if (cmd == "validate") return cmd_validate(exp);

  for (int i = 0; i < argc; ++i) ro.command_line += (i ? " " : "") + std::string(argv[i]);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  return run_experiment(exp, ro);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "asgdsim: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const ConfigError& e) {
    std::cerr << "asgdsim: invalid config:\n" << e.what() << "\n";
    return 2;
  } catch (const DataError& e) {
    std::cerr << "asgdsim: bad data: " << e.what() << "\n";
    return 2;
  } catch (const IoError& e) {
    std::cerr << "asgdsim: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "asgdsim: error: " << e.what() << "\n";
    return 1;
  }
}
