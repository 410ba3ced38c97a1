// experiments/cli/main.cpp — the asgdsim command line. Parses arguments, turns exceptions into
// exit codes (0 done, 2 invalid input, 1 other failure, 130 interrupted). Nothing below
// main calls exit().
#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>
#include <boost/program_options.hpp>
#include <unistd.h>
#include "experiments/run/build_info.h"
#include "engines/engine_registry.h"
#include "experiments/bench/bench.h"
#include "experiments/cluster/cluster.h"
#include "experiments/config/config.h"
#include "experiments/config/experiment_file.h"
#include "experiments/cluster/mpi_env.h"
#include "experiments/config/resources.h"
#include "experiments/run/run_parts.h"
#include "experiments/run/runner.h"
#include "sim/run/atomic_file.h"
#include "sim/timing/distribution.h"
#include "sim/data/idx_reader.h"
#include "sim/base/interrupt.h"
#include "sim/base/time.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace asgd;

namespace {

constexpr const char* kUsage =
    "usage:\n"
    "  asgdsim run CONFIG.json [--set KEY.PATH=VALUE]... [--out DIR] [--threads N] [--jobs N] [--shard I/K] [--rerun] "
    "[--supersede] [--recalibrate] [--wait] [--quiet] [--trace]\n"
    "  mpirun -np K asgdsim run CONFIG.json ...      (the runs spread over K ranks; needs an MPI build)\n"
    "  mpirun -np N+1 asgdsim cluster CONFIG.json [--set ...] [--out DIR] [--rerun] [--supersede] [--quiet] [--trace]\n"
    "                                                (real processes: rank 0 the server, N workers)\n"
    "  asgdsim validate CONFIG.json [--set KEY.PATH=VALUE]...\n"
    "  asgdsim index OUT/NAME [--quiet] [--wait]      (rebuilds index.csv from the run folders there)\n"
    "  asgdsim list [--markdown]\n"
    "  asgdsim bench [--threads N] [--quick] [--only a,b,c,d,e,f,g] [--json FILE] [--repeats R] [--data DIR]\n"
    "                [--batched-gradients K]\n"
    "  asgdsim --version\n"
    "exit codes: 0 done, 2 invalid input (config, usage, data, files; the experiment folder in use), 1 other failure,\n"
    "            130 interrupted (SIGINT, SIGTERM, SIGHUP)\n";

// What each command does, for `asgdsim --help`; `asgdsim COMMAND --help` describes its options.
const std::vector<std::pair<std::string, std::string>> kCommands = {
    {"run", "run an experiment in virtual time: every engine x sweep point x repeat, into OUT/<name>/"},
    {"cluster", "run an experiment's engines for real, one MPI process per worker (mpirun -np N+1)"},
    {"validate", "check a config and list the runs it makes (run id, engine, sweep values, seed); writes nothing"},
    {"index", "rebuild OUT/<name>/index.csv from the run folders there (after copying shards' folders together)"},
    {"list", "every config key, engine, model, dataset, distribution, staleness mode and schedule"},
    {"bench", "the simulator's speed against a bare training loop on the same kernels (workloads a..f)"},
};

std::string top_help() {
  std::string text = "asgdsim — an asynchronous-SGD simulator and research testbed\n\ncommands:\n";
  for (const auto& [name, what] : kCommands) text += "  " + name + std::string(10 - name.size(), ' ') + what + "\n";
  text += "\n'asgdsim COMMAND --help' (or -h, or 'asgdsim help COMMAND') describes a command's options.\n\n";
  return text + kUsage;
}

void on_signal(int) {
  if (interrupt_count().fetch_add(1) >= 1) _exit(130);  // second signal: leave now
}

// The command line as meta.json records it: bytes that are not UTF-8 (a path can hold
// any) become '?', since JSON holds only UTF-8.
std::string printable_command_line(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) {
    line += (i ? " " : "") + utf8_or_question_marks(argv[i]);
  }
  return line;
}

void print_params(const std::vector<ParamInfo>& params, const std::string& indent) {
  for (const auto& p : params) {
    std::cout << indent << p.name << " (" << describe_allowed(p) << ", "
              << (p.required() ? std::string("required") : "default " + p.default_value.dump()) << "): " << p.doc
              << "\n";
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
  for (const auto& f : families()) print_components(f.title, f.key, f.catalog);
  return 0;
}

// ---- `list --markdown`: docs/config.md, from the same catalogs ----

// The smallest valid config; what it resolves to shows every default.
const json kSmallestConfig = {{"model", {{"type", "softmax"}}}, {"engines", json::array({{{"type", "async"}}})}};

std::string md_escape(std::string s) {
  for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.replace(i, 1, "\\|");
  return s;
}

// A value to show in the example column: the default when it says something, else a
// value of the right type inside the range.
json example_value(const ParamInfo& p) {
  const json& d = p.default_value;
  bool empty = d.is_null() || (d.is_string() && d.get<std::string>().empty()) || (d.is_array() && d.empty());
  if (!empty) return d;
  double lo = std::isfinite(p.min) ? p.min + (p.min_exclusive ? 1 : 0) : 1;
  double one = (1 >= lo && 1 <= p.max) ? 1 : std::min(lo, p.max);
  switch (p.type) {
    case ParamType::Boolean:
      return true;
    case ParamType::String:
      return p.choices.empty() ? json("...") : json(p.choices.front());
    case ParamType::Integer:
      return int64_t(one);
    case ParamType::IntegerList:
      return json::array({int64_t(one)});
    case ParamType::NumberList:
      return json::array({one});
    case ParamType::Number:
    case ParamType::Any:
      return one;
  }
  return nullptr;
}

// `prefix` is where the keys live as --set writes it ("" at the top, "engines[0]", ...).
void md_params(std::ostream& out, const std::vector<ParamInfo>& params, const std::string& prefix) {
  if (params.empty()) {
    out << "No parameters.\n";
    return;
  }
  out << "| key | type and range | default | example | meaning |\n| --- | --- | --- | --- | --- |\n";
  for (const auto& p : params) {
    json ex = example_value(p);
    std::string path = (prefix.empty() ? "" : prefix + ".") + p.name;
    out << "| `" << p.name << "` | " << md_escape(describe_allowed(p)) << " | "
        << (p.required() ? std::string("**required**") : "`" + md_escape(p.default_value.dump()) + "`") << " | `--set "
        << md_escape(path + "=" + value_text(ex)) << "` | " << md_escape(p.doc) << " |\n";
  }
}

// "engines[].type" -> "engines[0]"; "model.type" -> "model".
std::string set_prefix(std::string path) {
  size_t dot = path.find_last_of('.');
  path = dot == std::string::npos ? "" : path.substr(0, dot);
  for (size_t i = 0; (i = path.find("[]", i)) != std::string::npos;) path.replace(i, 2, "[0]");
  return path;
}

int cmd_list_markdown() {
  Experiment smallest = resolve_experiment(kSmallestConfig, "the smallest config", ".");
  const json& run = smallest.runs.front().config;
  std::ostream& out = std::cout;
  out << "# asgdsim config reference\n\n"
         "<!-- Generated by `asgdsim list --markdown`: do not edit by hand. -->\n"
         "This page is generated by `build/asgdsim list --markdown > docs/config.md` from the catalogs that\n"
         "validate configs and that `asgdsim list` prints: each key's declaration beside the code that uses it\n"
         "(the run's sections and the staleness and schedule families in `sim/run/settings.cpp`, each engine in\n"
         "its own `engines/*.cpp`, the models in `sim/models/catalog.cpp`, the distributions in\n"
         "`sim/timing/distribution.cpp`, the data sets in `experiments/config/config.cpp`). Whoever adds or changes a "
         "config key, engine,\n"
         "model, dataset, distribution, staleness mode or schedule must regenerate it; the test\n"
         "`ConfigDocs.ConfigMdIsTheOutputOfListMarkdown` fails while it is out of date.\n\n"
         "A config is one JSON object (comments allowed). Validation is strict: an unknown key (with the\n"
         "nearest valid one suggested), a wrong type, a value out of range or a missing required key is an\n"
         "error naming its JSON path, every error of a config is reported at once, and `asgdsim` exits 2.\n"
         "In the tables, *example* is an argument of `asgdsim run` or `asgdsim validate` that sets the key\n"
         "(the value is read as JSON, else as a string; a list element must exist before `--set` reaches\n"
         "into it).\n\n"
         "## The smallest config, and what it resolves to\n\n"
         "Only `model` and `engines` are required:\n\n```json\n"
      << kSmallestConfig.dump() << "\n```\n\n"
      << "Every default filled in, as `asgdsim run` writes it to `OUT/<name>/experiment.json` (each run's\n"
         "`config.json` holds the same, with its one `engine`, its sweep values and its seed):\n\n```json\n"
      << smallest.resolved.dump(2) << "\n```\n\n"
      << "One run is made per engine × sweep point × repeat. `sweep` maps dotted keys to lists of values\n"
         "(`{\"train.lr\": [0.05, 0.1], \"engine.period\": [1, 4]}`; an `engine.` key sets the parameter of\n"
         "the engines that have it, and the others run without it) and runs their cartesian product; `repeats` runs "
         "each point with seeds `seed`,\n"
         "`seed + 1`, .... A run's id is `<engine>[-<key>=<value>...]-seed<seed>`.\n";
  for (const auto& s : section_catalog()) {
    out << "\n## " << (s.name == "top" ? std::string("Top-level keys") : "`" + s.name + "`: " + s.doc) << "\n\n";
    md_params(out, s.params, s.name == "top" ? "" : set_prefix(s.name + ".x"));
    std::string pointer = "/" + s.name;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    json at = s.name == "top" ? smallest.resolved : smallest.resolved.value(json::json_pointer(pointer), json());
    json differ = json::object();  // what a left-out section resolves to, where not its keys' defaults
    for (const auto& p : s.params)
      if (at.is_object() && at.contains(p.name) && at[p.name] != p.default_value) differ[p.name] = at[p.name];
    if (s.name != "top" && !differ.empty()) out << "\nLeft out, `" << s.name << "` is `" << differ.dump() << "`.\n";
  }
  for (const auto& f : families()) {
    std::string key = f.key, prefix = set_prefix(key);
    std::string chooser = key.substr(key.find_last_of('.') + 1);
    out << "\n## " << f.title << ": `" << key << "`\n\n";
    json at = run;  // the choosing key's value in the smallest config, resolved
    std::string tail = key;
    for (size_t dot; !at.is_null() && (dot = tail.find('.')) != std::string::npos; tail = tail.substr(dot + 1))
      at = at.value(tail.substr(0, dot), json());
    bool required = key == "model.type" || key == "engines[].type";
    out << "`" << chooser << "` is one of: ";
    for (size_t i = 0; i < f.catalog.size(); ++i) out << (i ? ", " : "") << "`" << f.catalog[i].name << "`";
    if (!required && at.is_object() && at.contains(chooser)) {  // the default, less what its parameters' defaults say
      json shown = {{chooser, at[chooser]}};
      for (const auto& c : f.catalog)
        if (c.name == at[chooser])
          for (const auto& p : c.params)
            if (at.contains(p.name) && at[p.name] != p.default_value) shown[p.name] = at[p.name];
      out << " (default: `" << shown.dump() << "`).\n";
    } else {
      out << (required ? " (required).\n" : ".\n");
    }
    if (key == "engines[].type")
      out << "\n`engines` is a non-empty list; each element is an object with `type`, an optional `name` (its\n"
             "label in run ids, plots and tables; default: its type; labels must be distinct), an optional\n"
             "`train` and the engine's parameters below. `train` holds `train` keys that this engine's runs\n"
             "use instead of the experiment's (`{\"type\": \"async\", \"train\": {\"lr\": 0.01, \"momentum\": 0}}`:\n"
             "each engine at its own learning rate, momentum or optimizer); they are checked as `train`'s,\n"
             "errors name them `engines[i].train.<key>`, a run's `config.json` holds the merged `train` and the\n"
             "engine's `train` as given, and a key set to null goes back to its default. An `lr_schedule` of\n"
             "another type replaces the experiment's. The sweep key `engine.train.<key>` varies it for every\n"
             "engine; a sweep of `train.<key>` beside an engine that sets that key is refused.\n";
    for (const auto& c : f.catalog) {
      out << "\n### `" << c.name << "`\n\n" << c.doc << ".\n\n";
      md_params(out, c.params, prefix);
    }
  }
  return 0;
}

// The options of run, validate and cluster, bound to sets and ro. All three commands parse
// every option (validate ignores run's, so a run's command line validates as is; cluster
// refuses run's with a reason); `for_help` keeps only those the command uses.
po::options_description experiment_options(const std::string& cmd, std::vector<std::string>& sets, RunnerOptions& ro,
                                           bool for_help, bool& force_given) {
  po::options_description opts("options");
  opts.add_options()(
      "set", po::value<std::vector<std::string>>(&sets)->composing()->value_name("KEY.PATH=VALUE"),
      "override a config key; VALUE is read as JSON, else as a string (train.lr=0.05, "
      "engines[0].type=sync, model={\"type\":\"mlp\"}); repeatable. sweep.KEY=[v1,v2] adds or replaces one "
      "sweep key, keeping the others");
  if (for_help && cmd == "validate") {
    opts.add_options()("help,h", "print this help and exit");
    return opts;  // run's other options are accepted and ignored
  }
  opts.add_options()("out", po::value<std::string>(&ro.out_dir)->default_value("runs")->value_name("DIR"),
                     "the experiment goes into DIR/<name>/ (a run per folder, index.csv, experiment.json)")(
      "rerun", po::bool_switch(&ro.replace.rerun),
      "make again the runs of this config that are done (completed, stalled, diverged); they are skipped otherwise")(
      "supersede", po::bool_switch(&ro.replace.supersede),
      "move run folders of another config (an earlier sweep, a changed key) into OUT/<name>/superseded-<UTC time>/ "
      "so that this run can go on (refused otherwise); re-runs nothing, deletes nothing")(
      "quiet", po::bool_switch(&ro.quiet), "no progress or per-run lines; only where the results went, and errors")(
      "trace", po::bool_switch(&ro.trace), "write trace.json (Chrome/Perfetto trace events) for every run")(
      "recalibrate", po::bool_switch(&ro.recalibrate),
      "cluster.compute \"measured\": time the gradients again instead of replaying the experiment's traces");
  if (!for_help || cmd == "run")
    opts.add_options()(
        "threads", po::value<std::string>()->default_value("0")->value_name("N"),
        "worker threads of the pool that computes gradients (0 = every core; results do not depend on it)")(
        "jobs", po::value<std::string>()->default_value("1")->value_name("N"),
        "runs made side by side, each with threads/N threads (their memory is checked to fit first)")(
        "shard", po::value<std::string>()->value_name("I/K"),
        "make only runs k with k mod K == I, to split an experiment over machines (not with mpirun)")(
        "wait", po::bool_switch(&ro.wait), "wait while another asgdsim uses the experiment folder (else exit 2)")(
        "checkpoint-every",
        po::value<double>(&ro.checkpoint_every)->default_value(kDefaultCheckpointSeconds)->value_name("SECONDS"),
        "write each run's whole state to RUN/checkpoint.bin every SECONDS of wall time and when interrupted; a run "
        "found with one resumes from it, with the files an uninterrupted run writes (docs/reliability.md; 0: none)")(
        "interrupt-after-updates", po::value<uint64_t>(&ro.interrupt_after_updates)->value_name("N"),
        "testing checkpoints: each run stops as on Ctrl-C once it has applied N updates");
  if (!for_help)  // gone, split in two: parsed only to say so (dispatch)
    opts.add_options()("force", po::bool_switch(&force_given));
  opts.add_options()("help,h", "print this help and exit");
  return opts;
}

std::string command_help(const std::string& cmd) {
  std::vector<std::string> sets;
  RunnerOptions ro;
  bool force_given = false;
  std::ostringstream out;
  if (cmd == "run" || cmd == "validate" || cmd == "cluster") {
    if (cmd == "run")
      out << "usage: asgdsim run CONFIG.json [options]\n"
             "       mpirun -np K asgdsim run CONFIG.json [options]   (runs spread over K ranks)\n\n"
             "Runs every engine x sweep point x repeat of the experiment in virtual time and writes\n"
             "OUT/<name>/ (docs/outputs.md). Runs of the same config already done are kept (resume;\n"
             "--rerun makes them again); run folders of another config are refused (--supersede moves\n"
             "them aside). --shard I/K splits the runs over machines (docs/slurm.md; asgdsim index\n"
             "rebuilds index.csv once their folders are copied together).\n";
    if (cmd == "validate")
      out << "usage: asgdsim validate CONFIG.json [options]\n\n"
             "Checks the config (every error at once, exit 2) and lists the runs it makes: run id,\n"
             "engine, sweep values, seed. Writes nothing. run's other options are accepted (their\n"
             "values checked as run checks them) and ignored, so a run's command line validates\n"
             "as it is.\n";
    if (cmd == "cluster")
      out << "usage: mpirun -np N+1 asgdsim cluster CONFIG.json [options]\n\n"
             "Runs the experiment's engines for real: rank 0 the server, ranks 1..N the workers\n"
             "(docs/cluster.md). --threads, --jobs, --shard and --wait do not apply.\n";
    out << "\nCONFIG.json   the experiment config (JSON, comments allowed; keys: asgdsim list, docs/config.md)\n\n"
        << experiment_options(cmd, sets, ro, true, force_given);
  } else if (cmd == "index") {
    out << "usage: asgdsim index OUT/NAME [--quiet] [--wait]\n\n"
           "Rebuilds OUT/NAME/index.csv from the run folders there, as asgdsim run writes it (same\n"
           "columns and rows; atomic; under OUT/NAME/.index.lock): for an experiment whose runs were\n"
           "made on several machines' own disks (run --shard I/K) and copied together (docs/slurm.md).\n"
           "A run whose folder is not there has no row. Refused (exit 2, nothing written): a folder\n"
           "without experiment.json, without run folders, or holding run folders its experiment.json\n"
           "does not make.\n\noptions:\n"
           "  --quiet               print nothing but errors\n"
           "  --wait                wait while an asgdsim run uses the folder (else exit 2)\n"
           "  -h [ --help ]         print this help and exit\n";
  } else if (cmd == "list") {
    out << "usage: asgdsim list [--markdown]\n\n"
           "Lists every config key (type, range, default, meaning), engine, model, dataset,\n"
           "distribution, staleness mode and learning-rate schedule.\n\noptions:\n"
           "  --markdown            the same as Markdown: docs/config.md is its output\n"
           "  -h [ --help ]         print this help and exit\n";
  } else if (cmd == "bench") {
    po::options_description opts("options");  // parse_bench_options parses these
    opts.add_options()("threads", po::value<int>()->default_value(0)->value_name("N"),
                       "worker threads of both sides (0 = every core)")(
        "quick", "smaller workloads: seconds instead of a minute")(
        "only", po::value<std::string>()->value_name("a,b,..."), "only these workloads (letters a..f; default all)")(
        "json", po::value<std::string>()->value_name("FILE"), "also write the results as JSON lines to FILE")(
        "repeats", po::value<int>()->value_name("R"), "timed (simulator, bare loop) pairs per workload (default 3)")(
        "data", po::value<std::string>()->value_name("DIR"),
        (std::string("Fashion-MNIST folder (default ") + kFashionMnistDir + ")").c_str())(
        "batched-gradients", po::value<int>()->default_value(1)->value_name("K"),
        "a, b, f: gradients per loss_grad_batch call, on both sides (1..1024)")("help,h", "print this help and exit");
    out << "usage: asgdsim bench [options]\n\n"
           "Measures the simulator's throughput against a bare training loop on the same kernels,\n"
           "alternating the two (README, Benchmark).\n\n"
        << opts;
  }
  return out.str();
}

bool asks_for_help(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") return true;
  return false;
}

int cmd_validate(const Experiment& exp) {
  std::cout << runs_text(exp);
  for (const auto& w : exp.warnings) std::cerr << "asgdsim: warning: " << w << "\n";
  return 0;
}

// "I/K" -> (I, K), 0 <= I < K.
std::pair<int, int> parse_shard(const std::string& text) {
  size_t slash = text.find('/');
  try {
    if (slash != std::string::npos) {
      size_t a = 0, b = 0;
      int i = std::stoi(text.substr(0, slash), &a), k = std::stoi(text.substr(slash + 1), &b);
      if (a == slash && b == text.size() - slash - 1 && k >= 1 && i >= 0 && i < k) return {i, k};
    }
  } catch (const std::exception&) {
  }
  throw UsageError("--shard '" + printable(text) + "': expected I/K with 0 <= I < K (e.g. --shard 0/4)");
}

// `asgdsim run` under mpirun: each rank makes its share of the runs (run k on rank
// k mod K), and rank 0 writes index.csv once every rank is done. A rank's error reaches
// its own stderr and exit code; the others finish their runs.
int report_error(std::exception_ptr error);

int run_on_ranks(const Experiment& exp, RunnerOptions ro, const MpiEnv& mpi) {
  ro.shard = mpi.rank();
  ro.shards = mpi.size();
  ro.write_index = false;
  int code = 0;
  try {
    code = run_experiment(exp, ro);
  } catch (...) {
    code = report_error(std::current_exception());
  }
  int worst = code;
  try {
    worst = mpi.all_max(code);  // every rank is done (or one is lost: then index.csv says what is done)
  } catch (const std::exception& e) {
    if (mpi.rank() == 0) std::cerr << "asgdsim: error: " << e.what() << "\n";
    worst = code = std::max(code, 1);
  }
  if (mpi.rank() == 0) {
    const std::string exp_dir = ro.out_dir + "/" + experiment_name(exp);
    try {
      write_index(exp, exp_dir);
    } catch (...) {
      return std::max(code, report_error(std::current_exception()));
    }
    std::cout << "results: " << exp_dir << (worst ? " (some runs did not end well: see above)" : "") << "\n";
  }
  return code;
}

// The commands that take no experiment: help, --version, list, bench, index. Empty for
// run, validate and cluster (the caller's); an unknown command is a UsageError.
std::optional<int> run_small_command(const std::string& cmd, int argc, char** argv, const MpiEnv& mpi) {
  if (cmd == "-h" || cmd == "--help" || (cmd == "help" && argc == 2)) {
    std::cout << top_help();
    return 0;
  }
  if (cmd == "help") {  // asgdsim help COMMAND
    std::string text = command_help(argv[2]);
    if (text.empty()) throw UsageError("help: unknown command '" + std::string(argv[2]) + "'");
    std::cout << text;
    return 0;
  }
  if (asks_for_help(argc, argv)) {
    std::string text = command_help(cmd);
    if (text.empty()) throw UsageError("unknown command '" + cmd + "'");
    std::cout << text;
    return 0;
  }
  if (cmd == "--version") {
    std::cout << "asgdsim " << build::version << " " << build::git_commit << (build::git_dirty ? "-dirty" : "")
              << " backend " << build::backend << "\n";
    return 0;
  }
  if (cmd == "list" && argc == 3 && std::string(argv[2]) == "--markdown") return cmd_list_markdown();
  if (cmd == "list") {
    if (argc > 2) throw UsageError("list takes no arguments but --markdown");
    return cmd_list();
  }
  if (cmd == "bench") {
    BenchOptions bo;
    try {
      bo = parse_bench_options(argc - 1, argv + 1);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    return run_bench(bo, std::cout);
  }
  if (cmd == "index") {
    if (mpi.size() > 1) throw UsageError("asgdsim index runs alone, not under mpirun");
    std::vector<std::string> args(argv + 2, argv + argc);
    auto flag = [&](const char* name) {
      const bool given = std::find(args.begin(), args.end(), name) != args.end();
      args.erase(std::remove(args.begin(), args.end(), name), args.end());
      return given;
    };
    const bool quiet = flag("--quiet"), wait = flag("--wait");
    if (args.size() != 1 || args[0].empty() || args[0][0] == '-')
      throw UsageError("index takes one experiment folder, OUT/<name> (and --quiet, --wait)");
    std::signal(SIGINT, on_signal);  // --wait polls for it
    std::signal(SIGTERM, on_signal);
    return rebuild_index(args[0], printable_command_line(argc, argv), quiet, wait) > 0 ? 0 : 130;
  }
  if (cmd != "run" && cmd != "validate" && cmd != "cluster") throw UsageError("unknown command '" + cmd + "'");
  return std::nullopt;
}

// Under mpirun every rank must run the same thing: an extra --set or another config file
// on one rank is exit 2 on all (MpiEnv::agree names the rank and the difference), and a
// rank that refused its command line (`error`, `what`) fails them all alike.
Experiment load_on_every_rank(const std::string& cmd, const std::string& config, const std::vector<std::string>& sets,
                              const RunnerOptions& ro, const MpiEnv& mpi, std::exception_ptr error, std::string what) {
  Experiment exp;
  if (!error) {
    try {
      exp = load_experiment(config, sets);
    } catch (const std::exception& e) {
      error = std::current_exception();
      what = "could not read its config: " + printable(e.what());
    }
  }
  json options = {{"command", cmd},
                  {"out", ro.out_dir},
                  {"rerun", ro.replace.rerun},
                  {"supersede", ro.replace.supersede},
                  {"trace", ro.trace},
                  {"threads", ro.threads},
                  {"jobs", ro.jobs}};
  mpi.agree(error ? std::string() : json{{"config", exp.resolved}, {"options", options}}.dump(1), bool(error), what);
  if (error) std::rethrow_exception(error);  // every rank failed alike
  double timeout = 0;                        // the heartbeat's bound on a silent peer: the config's real.worker_timeout
  for (const auto& r : exp.runs) timeout = std::max(timeout, r.settings.real_worker_timeout);
  if (timeout > 0) mpi.set_peer_timeout(timeout);
  return exp;
}

// The command line of run, validate or cluster into sets, ro and vm (config: the one
// positional argument); a UsageError for anything it refuses.
void parse_experiment_command(const std::string& cmd, int argc, char** argv, const MpiEnv& mpi,
                              std::vector<std::string>& sets, RunnerOptions& ro, po::variables_map& vm) {
  bool force_given = false;
  po::options_description opts = experiment_options(cmd, sets, ro, false, force_given);
  opts.add_options()("config", po::value<std::string>(), "experiment config (JSON)");
  po::positional_options_description pos;
  pos.add("config", 1);
  try {
    po::store(po::command_line_parser(argc - 1, argv + 1).options(opts).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  if (force_given)  // it did both, so that tidying a folder re-ran every finished run (issue 32)
    throw UsageError(
        "--force is gone, split in two: --supersede moves run folders of another config aside "
        "(nothing re-runs), --rerun makes again the runs already done; pass both for what --force did");
  if (!vm.count("config")) throw UsageError("missing CONFIG.json");
  set_run_counts(ro, vm["threads"].as<std::string>(), vm["jobs"].as<std::string>());
  if (ro.out_dir.empty()) throw UsageError("--out is empty: give the folder the experiment goes under");
  if (!(ro.checkpoint_every >= 0) || !std::isfinite(ro.checkpoint_every))
    throw UsageError("--checkpoint-every " + format_number(ro.checkpoint_every) +
                     ": give the wall seconds between a run's checkpoints (>= 0; 0: none)");

  if (vm.count("shard")) {
    // validate accepts run's options (its help says so): --shard is checked as run checks
    // it, and ignored, so that a run's command line validates as it is.
    if (cmd == "cluster") throw UsageError("--shard is for asgdsim run");
    if (mpi.size() > 1 && cmd == "run") throw UsageError("--shard and mpirun both split the runs: use one of them");
    std::tie(ro.shard, ro.shards) = parse_shard(vm["shard"].as<std::string>());
  }
  if (cmd == "cluster" && (ro.threads != 0 || ro.jobs != 1))
    throw UsageError("asgdsim cluster runs one process per worker: --threads and --jobs do not apply");
  if (cmd == "cluster" && ro.wait) throw UsageError("--wait is for asgdsim run");
  if (cmd == "cluster" && (!vm["checkpoint-every"].defaulted() || vm.count("interrupt-after-updates")))
    throw UsageError("checkpoints are asgdsim run's: a real run (asgdsim cluster) has none");
  if (cmd == "cluster" && (!mpi.active() || mpi.size() < 2))
    throw UsageError(
        "asgdsim cluster runs under MPI with one server and N workers: mpirun -np N+1 asgdsim cluster "
        "CONFIG (" +
        std::string(mpi.active() ? "this job has 1 rank" : "this process was not started by mpirun") + ")");
}

int dispatch(int argc, char** argv, const MpiEnv& mpi) {
  if (argc < 2) throw UsageError("missing command");
  std::string cmd = argv[1];
  if (std::optional<int> code = run_small_command(cmd, argc, argv, mpi)) return *code;

  std::vector<std::string> sets;
  RunnerOptions ro;
  po::variables_map vm;
  // Under mpirun a rank whose command line is refused must tell the others why, or they
  // wait for it until its heartbeat is missed (60 s) and say only that it stopped
  // answering: its error goes into the ranks' agreement below (MpiEnv::agree), rank 0
  // prints it once, and every rank exits 2.
  std::exception_ptr error;
  std::string what;
  try {
    parse_experiment_command(cmd, argc, argv, mpi, sets, ro, vm);
  } catch (const std::exception& e) {
    if (mpi.size() <= 1 || cmd == "validate") throw;
    error = std::current_exception();
    what = "refused its command line: " + printable(e.what());
  }
  if (cmd == "validate") return cmd_validate(load_experiment(vm["config"].as<std::string>(), sets));
  // (a rank whose command line was refused may have no config to name)
  const std::string config = vm.count("config") ? vm["config"].as<std::string>() : std::string();
  const Experiment exp =
      mpi.size() > 1 ? load_on_every_rank(cmd, config, sets, ro, mpi, error, what) : load_experiment(config, sets);

  ro.command_line = printable_command_line(argc, argv);
  if (mpi.size() > 1) ro.command_line = "mpirun -np " + std::to_string(mpi.size()) + " " + ro.command_line;
  // A hang-up (the terminal closed, an ssh session dropped) stops as Ctrl-C does: runs
  // under way end as interrupted and are written. A closed stdout (`| head`) is not a
  // reason to stop: writes to it fail (EPIPE) and printing stops; the runs go on.
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGHUP, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  if (cmd == "cluster") {
    ClusterOptions co;
    co.out_dir = ro.out_dir;
    co.quiet = ro.quiet;
    co.replace = ro.replace;
    co.trace = ro.trace;
    co.command_line = ro.command_line;
    return run_cluster(exp, co, mpi);
  }
  if (mpi.size() > 1) {
    if (ro.threads == 0)  // the cores of a host are shared by its ranks
      ro.threads = std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, mpi.local_size()));
    return run_on_ranks(exp, ro, mpi);
  }
  return run_experiment(exp, ro);
}

// Prints the error as main() reports it and returns its exit code.
int report_error(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::bad_alloc&) {  // what the memory estimate did not foresee
    std::cerr << "asgdsim: error: " << out_of_memory_text("") << "\n";
    return 1;
  } catch (...) {
  }
  std::cerr << "asgdsim: " << error_message(error) << "\n";
  try {
    std::rethrow_exception(error);
  } catch (const UsageError&) {
    std::cerr << kUsage;
  } catch (...) {
  }
  return exit_code_of(error);
}

}  // namespace

// dispatch(), with errors reported as exit codes.
int run_main(int argc, char** argv, const MpiEnv& mpi) {
  try {
    return dispatch(argc, argv, mpi);
  } catch (...) {
    std::exception_ptr error = std::current_exception();
    bool same_on_every_rank = false;  // invalid input: each rank found it; rank 0 says it
    try {
      std::rethrow_exception(error);
    } catch (const UsageError&) {
      same_on_every_rank = true;
    } catch (const ConfigError&) {
      same_on_every_rank = true;
    } catch (const RankMismatch&) {
      same_on_every_rank = true;
    } catch (...) {
    }
    if (same_on_every_rank && mpi.rank() != 0) return 2;
    return report_error(error);
  }
}

// std::terminate's handler: a std::bad_alloc thrown where it cannot be caught (nlohmann's
// json destructor allocates while it frees a deeply built value, and is noexcept) ends the
// process as a caught one does: exit 1 with words, not an abort (134) and a C++ runtime
// line. Written with write(2) from a fixed text: memory may be what is missing.
[[noreturn]] void on_terminate() {
  bool out_of_memory = false;
  const char* what = "an exception where none may be thrown";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      out_of_memory = true;
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
  }
  auto say = [](const char* text) {
    for (size_t n = std::strlen(text); n > 0;) {
      ssize_t k = ::write(STDERR_FILENO, text, n);
      if (k <= 0) break;
      text += k;
      n -= size_t(k);
    }
  };
  if (out_of_memory) {
    say("asgdsim: error: out of memory (std::bad_alloc): an allocation failed; this process's memory (physical "
        "memory, lowered by ulimit -v / -d and a cgroup memory.max) is too small for this input: make it smaller "
        "(the config file, the model, cluster.workers, the data) or raise the limit\n");
  } else {
    say("asgdsim: internal error: ");
    say(what);
    say("\n");
  }
  std::fflush(nullptr);
  std::_Exit(1);
}

int main(int argc, char** argv) {
  std::set_terminate(on_terminate);
  // A file-size limit (ulimit -f) is a write that fails with EFBIG, reported like a full
  // disk (exit 2 naming the file, its temporary file removed), not a SIGXFSZ that kills
  // the process (exit 153) and leaves the temporary file behind.
  std::signal(SIGXFSZ, SIG_IGN);
  MpiEnv mpi(argc, argv);  // under mpirun (MPI builds): MPI_Init here, MPI_Finalize on return
  int code = run_main(argc, argv, mpi);
  if (mpi.peer_lost()) {  // every file is written; MPI_Finalize would wait for the dead rank
    if (mpi.rank() == 0)
      std::cerr << "asgdsim: a rank of the job died or hangs: every rank leaves without MPI_Finalize (exit code "
                << code << ")\n";
    mpi.exit_without_finalize(code);
  }
  return code;
}
