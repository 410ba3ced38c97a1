// tests/test_bad_input.cpp — what asgdsim does with bad input and careless use, as a table:
// every case found by probing asgdsim as an attacker and a careless user would (issue 17's 14 defects, and later
// issues'), as rows of (input, expected exit code, words the output must hold, state of the folder afterwards). Each
// row is one test: a bash snippet run against the asgdsim binary in a folder of its own, with a time limit, so a hang
// is a failure and not a stuck suite.
//
// Placeholders in a row's command: {bin} the asgdsim under test, {cfg} the row's config
// file, {out} the --out folder, {dir} the row's folder (helper configs: long.json, a run
// of "base" that lasts minutes; sync.json, base with engine sync only), {src} the
// source tree. Helpers in the snippet: wait_for FILE, wait_grep FILE TEXT.
// State entries, paths relative to {out} unless they start with {dir} or /:
//   "P" exists, "!P" does not, "P~T" holds text T, "P!~T" does not, "P#N" has N lines,
//   "EMPTY" nothing was written under {out}.
//
// Rows marked control() hold with or without the fixes (valid configs next to refused
// ones, behaviour a fix must keep); every other row of defects 1-14 fails without them.
// To see which rows fail without the fixes, point the suite at another binary (and
// ASGD_HARDENING_SOURCE at another tree, for analysis/plot.py):
//   ASGD_HARDENING_BINARY=/path/to/old/asgdsim ASGD_HARDENING_TIMEOUT=20
//   ASGD_HARDENING_ULIMIT_KB=4000000 build/tests/test_bad_input   (one command line)
// (the time limit and the address-space limit keep the old hangs and memory bombs short).
// Not here: the write_file_atomic and full-disk cases (test_disk_and_signals.cpp), plot.py's
// own tests (tests/analysis).
#include <sys/stat.h>
#include <zlib.h>
#include <cstdlib>
#include <functional>
#include <set>
#include <nlohmann/json.hpp>
#include "sim/base/interrupt.h"
#include "sim/core/simulation.h"  // kStuckEvents*
#include "sim/data/partition.h"
#include "sim/run/file_lock.h"
#include "test_helpers.h"

using nlohmann::json;
using namespace asgd::testing;
namespace fs = std::filesystem;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ASGD_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ASGD_SANITIZED 1
#endif
#endif
#ifndef ASGD_SANITIZED
#define ASGD_SANITIZED 0
#endif

namespace {

// The issue's small config B.
const json kBase = json::parse(R"({"name": "base", "model": {"type": "quadratic", "dim": 10},
  "cluster": {"workers": 2}, "stop": {"updates": 200}, "engines": [{"type": "async"}, {"type": "sync"}]})");

json with(json c, const std::function<void(json&)>& edit) {
  edit(c);
  return c;
}
// Four engines and a row per update: a run that prints four lines.
const json kFour = with(kBase, [](json& c) {
  c["stop"]["updates"] = 20000;
  c["engines"] = json::array({{{"type", "async"}}, {{"type", "sync"}}, {{"type", "ssp"}}, {{"type", "easgd"}}});
});
// The earlier bad-input tests' config (tests/test_config.cpp).
const json kTiny = json::parse(R"({"name": "tiny", "model": {"type": "softmax"},
  "data": {"type": "synthetic", "classes": 3, "features": 6, "train_samples": 128, "test_samples": 64},
  "train": {"batch_size": 8, "lr": 0.1}, "stop": {"updates": 10}, "eval": {"every": 5, "unit": "updates"},
  "cluster": {"workers": 2}, "engines": [{"type": "async"}]})");

struct Ctx {
  std::string dir, out, cfg, output;
  int exit_code = -1;
};

struct Row {
  std::string id;
  int defect = 0;  // 1..14: the issue's defect; 0: an earlier bad-input case
  std::string config;
  std::string command;
  int exit = 0;
  std::vector<std::string> words;
  std::vector<std::string> state;
  std::function<void(Ctx&)> setup;  // before the command (files it needs)
  std::function<void(Ctx&)> check;  // after it, beyond words and state
  bool unsanitized_only = false;    // needs ulimit -v, which ASan/TSan cannot run under
  bool host_backend_only = false;   // an address-space limit below what the CUDA runtime maps
  // Holds with or without the defect's fix: what the fix must keep working (a valid config
  // near a refused one, the behaviour a refusal leaves alone).
  bool is_control = false;
  double timeout = 60;

  Row& cfg(const json& c) {
    config = c.dump();
    return *this;
  }
  Row& cfg_text(std::string text) {
    config = std::move(text);
    return *this;
  }
  Row& before(std::function<void(Ctx&)> f) {
    setup = std::move(f);
    return *this;
  }
  Row& after(std::function<void(Ctx&)> f) {
    check = std::move(f);
    return *this;
  }
  Row& no_sanitizer() {
    unsanitized_only = true;
    return *this;
  }
  Row& not_on_cuda() {
    host_backend_only = true;
    return *this;
  }
  Row& control() {
    is_control = true;
    return *this;
  }
  Row& limit(double seconds) {
    timeout = seconds;
    return *this;
  }
};
// gtest prints a parameter in test listings (and ctest's names): the row's id, not its bytes.
void PrintTo(const Row& r, std::ostream* os) { *os << r.id; }

Row row(std::string id, int defect, std::string command, int exit, std::vector<std::string> words = {},
        std::vector<std::string> state = {}) {
  Row r;
  r.id = std::move(id);
  r.defect = defect;
  r.config = kBase.dump();
  r.command = std::move(command);
  r.exit = exit;
  r.words = std::move(words);
  r.state = std::move(state);
  return r;
}
// `asgdsim validate` of a config: exit 2 naming the problem, nothing written.
Row invalid(std::string id, int defect, const json& config, std::vector<std::string> words, std::string sets = "") {
  return row(std::move(id), defect, "{bin} validate {cfg} " + sets, 2, std::move(words), {"EMPTY"}).cfg(config);
}
// `asgdsim run` of a config that is refused: exit 2 naming the problem, nothing written.
Row refused(std::string id, int defect, const json& config, std::vector<std::string> words, std::string sets = "") {
  return row(std::move(id), defect, "{bin} run {cfg} --quiet --out {out} " + sets, 2, std::move(words), {"EMPTY"})
      .cfg(config);
}

std::string quote(const std::string& s) {  // for bash, single-quoted
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

void write_gz(const std::string& path, const std::vector<uint8_t>& head, size_t zeros = 0) {
  gzFile f = gzopen(path.c_str(), "wb1");
  ASSERT_NE(f, nullptr) << path;
  if (!head.empty()) {
    ASSERT_EQ(gzwrite(f, head.data(), unsigned(head.size())), int(head.size()));
  }
  std::vector<uint8_t> chunk(1 << 20, 0);
  for (size_t left = zeros; left > 0;) {
    unsigned n = unsigned(std::min(left, chunk.size()));
    ASSERT_EQ(gzwrite(f, chunk.data(), n), int(n));
    left -= n;
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}
std::vector<uint8_t> be32(uint32_t v) { return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)}; }
std::vector<uint8_t> idx_images_header(uint32_t count, uint32_t rows, uint32_t cols) {
  std::vector<uint8_t> h = be32(0x803);
  for (uint32_t v : {count, rows, cols})
    for (uint8_t b : be32(v)) h.push_back(b);
  return h;
}
std::vector<uint8_t> idx_labels(uint32_t count) {
  std::vector<uint8_t> h = be32(0x801);
  for (uint8_t b : be32(count)) h.push_back(b);
  for (uint32_t i = 0; i < count; ++i) h.push_back(uint8_t(i % 10));
  return h;
}
// A Fashion-MNIST folder at {dir}/fm: real-shaped small sets, with the training images
// replaced by `train_images` (header + `zeros` zero bytes, gzip).
std::function<void(Ctx&)> fashion_folder(std::vector<uint8_t> train_images, size_t zeros,
                                         const std::string& name = "fm") {
  return [=](Ctx& c) {
    const std::string fm = c.dir + "/" + name;
    fs::create_directories(fm);
    write_gz(fm + "/train-images-idx3-ubyte.gz", train_images, zeros);
    write_gz(fm + "/train-labels-idx1-ubyte.gz", idx_labels(20));
    std::vector<uint8_t> test = idx_images_header(10, 28, 28);
    test.resize(test.size() + 10 * 784, 7);
    write_gz(fm + "/t10k-images-idx3-ubyte.gz", test);
    write_gz(fm + "/t10k-labels-idx1-ubyte.gz", idx_labels(10));
  };
}
const json kFashion = json::parse(R"({"name": "fm", "model": {"type": "softmax"},
  "data": {"type": "fashion_mnist", "path": "fm"}, "stop": {"updates": 5}, "engines": [{"type": "async"}]})");

// ---- issue 31's helpers
// svmlight text: n samples of classes -1/+1 with 5 increasing features each (whole lines).
std::string svm_lines(int n) {
  std::string t;
  for (int i = 0; i < n; ++i) {
    t += i % 2 ? "1" : "-1";
    for (int k = 1; k <= 5; ++k) t += " " + std::to_string(k * 7 + i % 5) + ":0." + std::to_string(1 + (i * k) % 9);
    t += "\n";
  }
  return t;
}
// `text` gzip'd into path and cut right after its first `keep` bytes were flushed whole:
// what inflates is whole lines, and the stream stops before its end (a download cut short).
void write_gz_cut(const std::string& path, const std::string& text, size_t keep) {
  gzFile f = gzopen(path.c_str(), "wb6");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, text.data(), unsigned(keep)), int(keep));
  ASSERT_EQ(gzflush(f, Z_FULL_FLUSH), Z_OK);
  const long at = long(gzoffset(f));
  ASSERT_EQ(gzwrite(f, text.data() + keep, unsigned(text.size() - keep)), int(text.size() - keep));
  ASSERT_EQ(gzclose(f), Z_OK);
  ASSERT_EQ(::truncate(path.c_str(), at), 0) << path;
}
// A file's last `bytes` bytes cut off.
void cut_tail(const std::string& path, size_t bytes) {
  ASSERT_EQ(::truncate(path.c_str(), off_t(fs::file_size(path) - bytes)), 0) << path;
}
const json kSvm = json::parse(R"({"name": "svm", "model": {"type": "sparse_softmax"},
  "data": {"type": "svmlight", "path": "d.svm"}, "stop": {"updates": 20}, "engines": [{"type": "async"}]})");
json svm_at(const std::string& path) {
  return with(kSvm, [&](json& c) { c["data"]["path"] = path; });
}
// No temporary file of write_file_atomic anywhere under dir.
void expect_no_temp_files(const std::string& dir) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    EXPECT_EQ(it->path().filename().string().find(".tmp."), std::string::npos) << "left behind: " << it->path();
}
// Output shown to a user: no raw control byte (but newline and tab), no byte that is not
// UTF-8, no "stoul", and no run of `digits` or more digits.
void expect_printable(const std::string& out, size_t digits = 40) {
  for (unsigned char c : out) {
    EXPECT_FALSE((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f || c == 0xff) << "raw byte " << int(c) << " in:\n"
                                                                                 << out;
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f || c == 0xff) break;
  }
  EXPECT_EQ(out.find("stoul"), std::string::npos) << out;
  EXPECT_EQ(out.find(std::string(digits, '0')), std::string::npos) << out;
}

// Issue 31: files, data and processes. Defect numbers 101..109 stand for its items 1..9.
void issue31_rows(std::vector<Row>& t) {
  const std::string run = "{bin} run {cfg} --quiet --out {out}";
  auto write = [](std::string name, std::string text) { return [=](Ctx& c) { write_text(c.dir + "/" + name, text); }; };

  // ---- 1. a gzip file cut short is bad data, not a smaller data set
  t.push_back(
      row("i31_1_svmlight_gzip_cut_short", 101, run, 2, {"cut.svm.gz", "truncated gzip data", "cut short"},
          {"svm/async-seed1/summary.json~failed"})
          .cfg(svm_at("cut.svm.gz"))
          .before([](Ctx& c) { write_gz_cut(c.dir + "/cut.svm.gz", svm_lines(3000), svm_lines(1000).size()); }));
  // (3,000 samples and the default 1 epoch: the loss barely moves, so "stalled" or
  // "completed"; what matters is that the whole file is read and the run not failed)
  t.push_back(row("i31_1_svmlight_gzip_whole_runs", 101, run, 0, {},
                  {"svm/async-seed1/metrics.csv", "svm/async-seed1/summary.json!~failed"})
                  .cfg(svm_at("whole.svm.gz"))
                  .before([](Ctx& c) {
                    const std::string text = svm_lines(3000);
                    write_gz(c.dir + "/whole.svm.gz", std::vector<uint8_t>(text.begin(), text.end()));
                  })
                  .control());
  {
    std::vector<uint8_t> images = idx_images_header(20, 28, 28);
    images.resize(images.size() + 20 * 784, 9);
    t.push_back(row("i31_1_idx_gzip_cut_short", 101, run, 2, {"train-images-idx3-ubyte.gz", "truncated gzip data"},
                    {"fm/async-seed1/summary.json~failed"})
                    .cfg(kFashion)
                    .before([images](Ctx& c) {
                      fashion_folder(images, 0)(c);
                      cut_tail(c.dir + "/fm/train-images-idx3-ubyte.gz", 6);  // its end (CRC, length) cut off
                    }));
  }

  // ---- 2. svmlight: lines without end, sizes from the file, Ctrl-C while reading
  t.push_back(row("i31_2_svmlight_dev_zero_line_too_long", 102, run, 2, {"/dev/zero:1", "line too long"},
                  {"svm/async-seed1/summary.json~failed"})
                  .cfg(svm_at("/dev/zero")));
  t.push_back(row("i31_2_svmlight_gzip_of_zeros_line_too_long", 102, run, 2, {"zeros.svm.gz:1", "line too long"},
                  {"svm/async-seed1/summary.json~failed"})
                  .cfg(svm_at("zeros.svm.gz"))
                  .before([](Ctx& c) { write_gz(c.dir + "/zeros.svm.gz", {}, size_t(80) << 20); }));
  t.push_back(
      row("i31_2_svmlight_feature_index_2147483647", 102, run, 2,
          {"big.svm", "its largest feature index is 2147483647", "would need about", "of memory, more than the"},
          {"svm/async-seed1/summary.json~failed"})
          .cfg(svm_at("big.svm"))
          .before(write("big.svm", [] {
            std::string t;
            for (int i = 0; i < 20; ++i) t += "1 1:1 2147483647:1\n-1 1:1\n";
            return t;
          }())));
  t.push_back(row("i31_2_svmlight_label_1e9", 102, run, 2,
                  {"labels.svm", "its labels make 1000000001 classes", "would need about", "of memory, more than the"},
                  {"svm/async-seed1/summary.json~failed"})
                  .cfg(svm_at("labels.svm"))
                  .before(write("labels.svm", [] {
                    std::string t;
                    for (int i = 0; i < 20; ++i) t += "0 1:1 2:1\n1 1:1\n1000000000 2:1\n";
                    return t;
                  }())));
  t.push_back(row("i31_2_svmlight_ctrl_c_while_reading", 102,  // an endless file of valid lines, from a FIFO
                  "mkfifo {dir}/endless.svm\n(yes '1 1:0.5 2:0.25' > {dir}/endless.svm 2>/dev/null &)\n" + run +
                      " & P=$!\nwait_for {out}/svm/async-seed1/meta.json || exit 99\nsleep 0.5\nkill -INT $P; wait $P",
                  130, {}, {"svm/async-seed1/summary.json~interrupted", "svm/index.csv~interrupted"})
                  .cfg(svm_at("endless.svm"))
                  .limit(30));

  // ---- 3. a model beyond the address-space limit is refused, not std::bad_alloc
  t.push_back(row("i31_3_model_beyond_ulimit_v_is_refused", 103,
                  "ulimit -v 1000000\n" + run +
                      " --set model.dim=40000000 --set 'engines=[{\"type\":\"async\"}]' "
                      "--set stop.updates=2",
                  2, {"model.dim", "would need about", "address-space limit", "ulimit -v"}, {"EMPTY"})
                  .no_sanitizer()
                  .not_on_cuda());
  t.push_back(row("i31_3_model_under_ulimit_v_runs", 103,
                  "ulimit -v 1000000\n" + run +
                      " --set model.dim=1000000 --set 'engines=[{\"type\":\"async\"}]' "
                      "--set stop.updates=2",
                  0, {}, {"base/async-seed1/summary.json~completed"})
                  .no_sanitizer()
                  .not_on_cuda()
                  .control());

  // An allocation failure the estimate cannot foresee (a 40 MB config of 20 million list
  // elements under a 400 MB address space): named as out of memory, exit 1, whether it is
  // caught or thrown where nothing may throw (nlohmann's destructor: it used to abort, 134).
  t.push_back(row("i31_3_out_of_memory_is_named", 103,
                  "python3 -c \"print('{\\\"model\\\": {\\\"type\\\": \\\"quadratic\\\"}, \\\"engines\\\": "
                  "[{\\\"type\\\": \\\"async\\\"}], \\\"description\\\": [' + '0,'*20000000 + '0]}')\" > "
                  "{dir}/huge.json\nulimit -v 400000\n{bin} validate {dir}/huge.json",
                  1, {"out of memory (std::bad_alloc)", "ulimit -v"})
                  .no_sanitizer()
                  .not_on_cuda());

  // ---- 4. a file-size limit is a write error (exit 2 naming the file), not SIGXFSZ (1 MiB: TSan
  // maps a file of its own and dies of SIGBUS under a 64 KiB limit; metrics.csv here is 2.4 MB)
  t.push_back(row("i31_4_file_size_limit_names_the_file", 104,
                  "ulimit -f 1024\n" + run +
                      " --set stop.updates=20000 --set 'eval={\"every\":1,\"unit\":\"updates\"}' "
                      "--set 'engines=[{\"type\":\"async\"}]'",
                  2, {"metrics.csv", "File too large"},
                  {"base/async-seed1/config.json", "!base/async-seed1/metrics.csv"})
                  .after([](Ctx& c) { expect_no_temp_files(c.out); }));

  // ---- 5. links inside the output tree are never followed
  auto victim = [](Ctx& c) {
    fs::create_directories(c.dir + "/victim");
    write_text(c.dir + "/victim/summary.json", "secret");
    write_text(c.dir + "/victim/metrics.csv", "keep");
  };
  const std::vector<std::string> victim_intact = {"{dir}/victim/summary.json~secret", "{dir}/victim/metrics.csv~keep",
                                                  "!{dir}/victim/config.json", "!{dir}/victim/experiment.json"};
  for (const std::string force : {"", " --rerun --supersede"}) {
    std::vector<std::string> state = victim_intact;
    state.push_back("!base/experiment.json");
    t.push_back(row("i31_5_run_folder_a_link" + std::string(force.empty() ? "" : "_rerun_supersede"), 105,
                    "mkdir -p {out}/base && ln -s {dir}/victim {out}/base/async-seed1\n" + run + force, 2,
                    {"base/async-seed1 is a symbolic link", "never writes or deletes through a link"}, state)
                    .before(victim));
  }
  t.push_back(row("i31_5_experiment_folder_a_link", 105, "mkdir -p {out} && ln -s {dir}/victim {out}/base\n" + run, 2,
                  {"/base is a symbolic link"},
                  [&] {
                    std::vector<std::string> s = victim_intact;
                    s.push_back("!{dir}/victim/.lock");
                    return s;
                  }())
                  .before(victim));
  t.push_back(row("i31_5_index_lock_a_link", 105,
                  "mkdir -p {out}/base && ln -s {dir}/victim/planted {out}/base/.index.lock\n" + run, 2,
                  {".index.lock is a symbolic link"}, {"!{dir}/victim/planted", "!base/experiment.json"})
                  .before(victim));
  t.push_back(row("i31_5_out_itself_a_link_is_fine", 105, "mkdir -p {dir}/real && ln -s {dir}/real {out}\n" + run, 0,
                  {}, {"{dir}/real/base/async-seed1/summary.json~completed"})
                  .control());

  // ---- 7. index.csv after a --rerun re-run killed with -9
  t.push_back(row("i31_7_index_after_rerun_killed", 107,
                  run + " || exit 98\ngrep -q async-seed1,async,1,completed {out}/base/index.csv || exit 97\n" + run +
                      " --rerun --supersede --set stop.updates=100000000 --set "
                      "'eval={\"every\":100000,\"unit\":\"updates\"}' & P=$!\n"
                      "wait_grep {out}/base/async-seed1/config.json 100000000 || exit 99\nkill -9 $P; wait $P; exit 0",
                  0, {},
                  {"base/index.csv~async-seed1,async,1,pending", "base/index.csv~sync-seed1,sync,1,pending",
                   "base/index.csv!~completed"}));

  // ---- 8. validate accepts run's options, as its help says
  t.push_back(row(
      "i31_8_validate_accepts_run_options", 108,
      "{bin} validate {cfg} --shard 0/2 --threads 2 --jobs 2 --out {out} --rerun --supersede --quiet --wait --trace", 0,
      {"async-seed1", "sync-seed1"}, {"EMPTY"}));
  t.push_back(row("i31_8_validate_checks_shard_as_run_does", 108, "{bin} validate {cfg} --shard 3/2", 2,
                  {"--shard '3/2': expected I/K"}, {"EMPTY"}));
  t.push_back(row("i31_8_validate_help_says_so", 108, "{bin} validate --help", 0, {"accepted", "ignored"}).control());

  // ---- 9. messages name the option and its value readably
  const std::string zeros300(300, '0');
  t.push_back(row("i31_9_threads_too_large_for_an_int", 109, run + " --threads 99999999999999999999999", 2,
                  {"--threads must be a whole number in 0..1024", "'99999999999999999999999'"}, {"EMPTY"})
                  .after([](Ctx& c) { expect_printable(c.output); }));
  t.push_back(row("i31_9_threads_300_digits", 109, run + " --threads 1" + zeros300, 2,
                  {"--threads must be a whole number", "(301 digits)"}, {"EMPTY"})
                  .after([](Ctx& c) { expect_printable(c.output); }));
  t.push_back(row("i31_9_shard_300_digits", 109, run + " --shard 1" + zeros300 + "/2", 2,
                  {"--shard '1000", "(301 digits)", "expected I/K"}, {"EMPTY"})
                  .after([](Ctx& c) { expect_printable(c.output); }));
  t.push_back(row("i31_9_set_index_too_large", 109, run + " --set 'engines[99999999999999999999999].type=sync'", 2,
                  {"--set engines[99999999999999999999999].type", "list index", "out of range"}, {"EMPTY"})
                  .after([](Ctx& c) { expect_printable(c.output); }));
  t.push_back(row("i31_9_set_key_with_a_control_byte", 109, run + " --set \"$(printf 'a\\001b=3')\"", 2,
                  {"a\\x01b", "unknown key"}, {"EMPTY"})
                  .after([](Ctx& c) { expect_printable(c.output); }));
  t.push_back(row("i31_9_jobs_with_raw_bytes", 109, run + " --jobs \"$(printf '9\\001\\377')\"", 2,
                  {"--jobs must be a whole number in 1..1024", "9\\x01\\xff"}, {"EMPTY"})
                  .after([](Ctx& c) { expect_printable(c.output); }));
  // ---- 10. issue 31's config-side defects (and issue 32's silent traps): refused by
  // validation, each naming its key, before anything is written
  t.push_back(refused("i31_10_engines_share_a_run_id_through_a_sweep", 110,
                      with(kBase,
                           [](json& c) {
                             c["engines"] =
                                 json::parse(R"([{"type":"async","name":"x-bound=3"},{"type":"ssp","name":"x"}])");
                             c["sweep"] = {{"engine.bound", {3}}};
                           }),
                      {"engines", "same run id 'x-bound=3-seed1'", "rename one of the engines"}));
  t.push_back(refused("i31_10_sweep_over_engine", 110,
                      with(kBase,
                           [](json& c) {
                             c["sweep"] = {{"engine", json::array({{{"type", "sync"}}})}};
                           }),
                      {"sweep.engine", "cannot be swept"}));
  t.push_back(refused("i31_10_sweep_over_engine_type", 110,
                      with(kBase,
                           [](json& c) {
                             c["sweep"] = {{"engine.type", {"sync", "easgd"}}};
                           }),
                      {"sweep.engine.type", "cannot be swept"}));
  t.push_back(refused("i31_10_sweep_over_run", 110,
                      with(kBase,
                           [](json& c) {
                             c["sweep"] = {{"run", {1, 2}}};
                           }),
                      {"sweep.run", "not a config key"}));
  t.push_back(refused("i31_10_sweep_2_and_2_0", 110,
                      with(kBase,
                           [](json& c) {
                             c["sweep"] = {{"train.lr", json::parse("[2, 2.0]")}};
                           }),
                      {"sweep.train.lr[1]", "same value as 2"}));
  for (const auto& [name, engine] :
       std::vector<std::pair<std::string, std::string>>{{"allreduce", R"({"type":"sync","comm":"allreduce"})"},
                                                        {"easgd", R"({"type":"easgd"})"},
                                                        {"local_sgd", R"({"type":"local_sgd"})"}})
    t.push_back(refused("i31_10_int8_not_applied_with_" + name, 110,
                        with(kBase,
                             [e = engine](json& c) {
                               c["engines"] = json::array({json::parse(e)});
                               c["cluster"]["network"] = {{"compression", {{"type", "int8"}}}};
                             }),
                        {"cluster.network.compression.type", "use \"none\""}));
  t.push_back(refused("i31_10_inverted_straggler_window", 110,
                      with(kBase,
                           [](json& c) {
                             c["cluster"]["stragglers"] = {
                                 {"slow", json::array({{{"worker", 0}, {"factor", 2}, {"from", 5}, {"to", 1}}})}};
                           }),
                      {"cluster.stragglers.slow[0].to", "not after `from`"}));
  t.push_back(refused("i31_10_image_features_above_the_cap", 110,
                      with(kTiny,
                           [](json& c) {
                             c["data"] = {{"type", "synthetic"}, {"image", {1, 1000, 1000}}};
                             c["model"] = {{"type", "cnn"}};
                           }),
                      {"data.image", "more than data.features may be"}));
  t.push_back(refused("i31_10_curvature_zero_in_float", 110,
                      with(kBase, [](json& c) { c["model"]["curvature"] = 1e-50; }),
                      {"model.curvature", "0 or infinite in float"}));
  t.push_back(refused("i31_10_message_bytes_unbounded", 110,
                      with(kBase,
                           [](json& c) {
                             c["cluster"]["network"] = {{"message_bytes", 1e300}};
                           }),
                      {"cluster.network.message_bytes"}));
  t.push_back(refused("i32_set_on_a_swept_key", 110,
                      with(kBase,
                           [](json& c) {
                             c["sweep"] = {{"train.lr", {0.1, 0.2}}};
                           }),
                      {"--set train.lr", "the sweep sets train.lr"}, "--set train.lr=0.5"));
  t.push_back(row("i31_9_config_key_with_nul", 109, "{bin} validate {cfg}", 2, {"a\\x00b", "unknown key"})
                  .cfg_text(R"({"a\u0000b": 1, "model": {"type": "quadratic"}, "engines": [{"type": "async"}]})")
                  .after([](Ctx& c) {
                    EXPECT_EQ(c.output.find('\0'), std::string::npos) << "a NUL byte in the output";
                    expect_printable(c.output);
                  }));
}

// Issue 42: the new surfaces (shards, calibration, planted FIFOs, index, partitions,
// messages). Defect numbers: High item k is 200 + k, Medium 210 + k, Low 230 + k (the
// Python package's items are tests/python/test_bad_input.py's).
const json kMeasured = json::parse(R"({"name": "m", "model": {"type": "softmax"},
  "data": {"type": "synthetic", "features": 8, "classes": 3, "train_samples": 64, "test_samples": 16},
  "cluster": {"workers": 2, "compute": {"dist": "measured", "steps": 3, "warmup": 0}},
  "stop": {"updates": 5}, "engines": [{"type": "async"}]})");
// A calibration that would time 100,000 steps of a 1.8-million-parameter MLP (minutes).
const json kSlowCalibration = with(kMeasured, [](json& c) {
  c["model"] = {{"type", "mlp"}, {"hidden", {1024, 1024}}};
  c["data"]["features"] = 784;
  c["cluster"]["compute"] = {{"dist", "measured"}, {"steps", 100000}, {"seconds", 600}, {"warmup", 0}};
});

std::vector<std::string> entries(const std::string& dir);

void issue42_rows(std::vector<Row>& t) {
  const std::string run = "{bin} run {cfg} --quiet --out {out}";
  auto write = [](std::string name, std::string text) { return [=](Ctx& c) { write_text(c.dir + "/" + name, text); }; };
  const std::string long_shard0 =  // shard 0/2 of "base", running until interrupted, as $P
      "{bin} run {dir}/long.json --shard 0/2 --quiet --out {out} & P=$!\n"
      "wait_for {out}/base/async-seed1/meta.json || exit 99\n";

  // ---- High 1: shards of another config are refused while others hold the folder
  t.push_back(row("i42_h1_supersede_from_another_config_refused_while_shards_run", 201,
                  long_shard0 + "{bin} run {dir}/long.json --shard 0/2 --set train.lr=0.05 --supersede --rerun --quiet "
                                "--out {out}; rc=$?\nkill -INT $P; wait $P; exit $rc",
                  2, {"is in use by processes of another config", "share it among themselves"},
                  {"base/async-seed1/config.json!~0.05", "base/experiment.json!~0.05",
                   "base/async-seed1/summary.json~interrupted"})
                  .after([](Ctx& c) {
                    for (const auto& e : entries(c.out + "/base"))
                      EXPECT_EQ(e.find("superseded-"), std::string::npos) << "a live shard's run was moved: " << e;
                  }));
  t.push_back(row("i42_h1_other_shard_of_another_config_refused", 201,
                  long_shard0 + "{bin} run {dir}/long.json --shard 1/2 --set train.lr=0.05 --quiet --out {out}; "
                                "rc=$?\nkill -INT $P; wait $P; exit $rc",
                  2, {"another config"}, {"base/experiment.json!~0.05"}));
  t.push_back(row("i42_h1_another_shard_count_refused", 201,
                  long_shard0 + "{bin} run {dir}/long.json --shard 1/3 --quiet --out {out}; rc=$?\n"
                                "kill -INT $P; wait $P; exit $rc",
                  2, {"in 2 shards; this one is", "in 3 shards"}));
  t.push_back(row("i42_h1_a_shard_of_the_same_config_joins", 201,
                  long_shard0 + "{bin} run {dir}/long.json --shard 1/2 --quiet --out {out}; rc=$?\n"
                                "kill -INT $P; wait $P; exit $rc",
                  0, {}, {"base/index.csv"})
                  .control());

  // ---- High 2: a calibration/ folder (or its lock) that is a link is refused
  t.push_back(
      row("i42_h2_calibration_folder_a_link", 202,
          "mkdir -p {out}/m {dir}/victim && ln -s {dir}/victim {out}/m/calibration\n" + run, 2,
          {"m/calibration is a symbolic link"}, {"!{dir}/victim/.lock", "!m/experiment.json"})
          .cfg(kMeasured)
          .after([](Ctx& c) { EXPECT_TRUE(entries(c.dir + "/victim").empty()) << "written through the link"; }));
  t.push_back(
      row("i42_h2_calibration_lock_a_link", 202,
          "mkdir -p {out}/m/calibration {dir}/victim && ln -s {dir}/victim/planted {out}/m/calibration/.lock\n" + run,
          2, {"calibration/.lock is a symbolic link"}, {"!{dir}/victim/planted", "!m/experiment.json"})
          .cfg(kMeasured));
  t.push_back(row("i42_h2_measured_runs", 202, run, 0, {}, {"m/async-seed1/summary.json~\"measured\""})
                  .cfg(kMeasured)
                  .control());

  // ---- High 3: Ctrl-C during calibration and while waiting for its lock
  t.push_back(row("i42_h3_ctrl_c_during_calibration", 203,
                  "{bin} run {cfg} --out {out} > {dir}/log.txt 2>&1 & P=$!\n"
                  "wait_grep {dir}/log.txt calibrating || exit 99\nsleep 0.5; kill -INT $P\n"
                  "s=$(date +%s%N); wait $P; rc=$?; e=$(( ($(date +%s%N) - s) / 1000000 )); cat {dir}/log.txt\n"
                  "echo \"stopped after ${e} ms\"; [ $e -le 3000 ] || exit 3; exit $rc",
                  130, {"interrupted by a signal while calibrating"}, {"!m/experiment.json"})
                  .cfg(kSlowCalibration));
  t.push_back(
      row("i42_h3_ctrl_c_while_waiting_for_the_calibration_lock", 203,
          "mkdir -p {out}/m/calibration\n"
          "(exec 9>{out}/m/calibration/.lock; flock 9; echo 'pid 1 on elsewhere (holder)' >&9; sleep 60) & H=$!\n"
          "sleep 0.3\n{bin} run {cfg} --out {out} > {dir}/log.txt 2>&1 & P=$!\n"
          "wait_grep {dir}/log.txt 'waiting for' || exit 99\nkill -INT $P; wait $P; rc=$?; kill $H\n"
          "cat {dir}/log.txt; exit $rc",
          130, {"waiting for", "calibration/.lock, in use by pid 1 on elsewhere (holder)", "interrupted by a signal"},
          {"!m/experiment.json"})
          .cfg(kMeasured));

  // ---- High 4: a FIFO planted in the output tree is refused, never opened blocking
  for (const std::string file :
       {"async-seed1/summary.json", "async-seed1/config.json", "experiment.json", "async-seed1/metrics.csv", ".lock"}) {
    std::string name = file.substr(file.rfind('/') + 1);
    name = name == ".lock" ? "lock" : name.substr(0, name.find('.'));
    for (const std::string command : {"run", "index"}) {
      if (file == "async-seed1/config.json" && command == "index") continue;  // below: a run folder of its own
      t.push_back(row("i42_h4_fifo_as_" + name + "_" + command, 204,
                      run + " || exit 98\nrm -f {out}/base/" + file + "\nmkfifo {out}/base/" + file + "\n" +
                          (command == "run" ? run : "{bin} index {out}/base"),
                      2, {file, "not a regular file (a FIFO)"})
                      .limit(20));
    }
  }
  t.push_back(row("i42_h4_fifo_as_config_json_index", 204,
                  run + " || exit 98\nrm {out}/base/sync-seed1/config.json\nmkfifo {out}/base/sync-seed1/config.json\n"
                        "{bin} index {out}/base",
                  2, {"sync-seed1/config.json is not a regular file (a FIFO)"})
                  .limit(20));

  // ---- Medium 5: index.csv lists a run as done only when `asgdsim run` would skip it
  for (const std::string how : {"rm", "cut"})
    for (const std::string file : {"metrics.csv", "workers.csv"})
      t.push_back(row("i42_m5_index_after_" + file.substr(0, file.find('.')) + "_" + how, 215,
                      run + " || exit 98\n" +
                          (how == "rm" ? "rm {out}/base/async-seed1/" + file
                                       : "head -c 10 {out}/base/async-seed1/" + file +
                                             " > {dir}/x && mv {dir}/x {out}/base/async-seed1/" + file) +
                          "\n{bin} index {out}/base",
                      0, {"1 completed, 1 incomplete"},
                      {"base/index.csv~async-seed1,async,1,incomplete", "base/index.csv~sync-seed1,sync,1,completed"}));

  // ---- Medium 6: partitions that cannot be made are refused by validation
  const json kSplit = with(kTiny, [](json& c) {
    c["data"]["partition"] = "dirichlet";
    c["data"]["classes"] = 10;
  });
  t.push_back(invalid("i42_m6_more_workers_than_samples", 216, kSplit,
                      {"data.partition", "600 workers but 128 training samples"}, "--set cluster.workers=600"));
  t.push_back(invalid("i42_m6_more_shards_than_samples", 216, kSplit, {"data.partition", "more shards than the 128"},
                      "--set data.partition=shards --set data.partition_shards=100"));
  t.push_back(invalid("i42_m6_800_shards_of_512_samples", 216, kSplit,
                      {"data.partition", "8 workers x 100 shards is more shards than the 512"},
                      "--set data.partition=shards --set data.partition_shards=100 --set cluster.workers=8 "
                      "--set data.train_samples=512"));
  t.push_back(invalid("i42_m6_alpha_1e-12", 216, kSplit,
                      {"data.partition", "alpha 1e-12", "every one of the 100 draws"},
                      "--set data.partition_alpha=1e-12 --set cluster.workers=8"));
  t.push_back(invalid("i42_m6_alpha_0.5_over_10000_workers", 216, kSplit,
                      {"data.partition", "alpha 0.5 over 10000 workers"},
                      "--set cluster.workers=10000 --set data.train_samples=60000"));
  t.push_back(row("i42_m6_a_split_that_can_be_made_runs", 216, run, 0, {}, {"tiny/async-seed1/partition.csv"})
                  .cfg(with(kSplit, [](json& c) { c["cluster"]["workers"] = 4; }))
                  .control());

  // ---- Medium 9: asgdsim cluster refuses measured compute before anything is written
  //      (checked with one MPI-less rank list: the refusal is the run's, ahead of mpirun's)
  // (tests/mpi/test_mpi.py runs it under mpirun)

  // ---- Low 4: an eps that fp32 makes 0
  t.push_back(refused("i42_l4_adam_eps_1e-300", 234, kBase, {"train.eps", "0 in float"},
                      "--set train.optimizer=adam --set train.eps=1e-300"));
  t.push_back(row("i42_l4_adam_eps_1e-30_runs", 234, run + " --set train.optimizer=adam --set train.eps=1e-30", 0, {},
                  {"base/async-seed1/summary.json"})
                  .control());

  // ---- Low 5: a measured trace that is not whole is refused, naming file and line
  auto measured_then = [&](const std::string& damage) {
    return run + " || exit 98\nT=$(ls {out}/m/calibration/*.trace)\n" + damage + "\n" + run + " --rerun";
  };
  t.push_back(row("i42_l5_trace_cut_mid_line", 235, measured_then("truncate -s -3 $T"), 2,
                  {".trace line", "cut short (the last line has no newline)"})
                  .cfg(kMeasured));
  t.push_back(row("i42_l5_trace_without_its_header", 235, measured_then("sed -i 1d $T"), 2,
                  {".trace line 1: not a measured compute trace"})
                  .cfg(kMeasured));
  t.push_back(row("i42_l5_trace_with_a_nul", 235, measured_then("printf '0.001\\0002\\n' >> $T"), 2,
                  {".trace line", "holds a NUL byte"})
                  .cfg(kMeasured));

  // ---- Low 6: index refuses a run folder that is a link, as run does
  t.push_back(
      row("i42_l6_index_run_folder_a_link", 236,
          run + " || exit 98\nmv {out}/base/sync-seed1 {dir}/elsewhere\nln -s {dir}/elsewhere {out}/base/sync-seed1\n"
                "{bin} index {out}/base",
          2, {"base/sync-seed1 is a symbolic link"}));

  // ---- Low 9: messages
  t.push_back(row("i42_l9_svmlight_value_beyond_float", 239, run, 2,
                  {"value 1e39 of index 2 is outside what a float holds"}, {"svm/async-seed1/summary.json~failed"})
                  .cfg(svm_at("big.svm"))
                  .before(write("big.svm", "1 1:0.5\n-1 2:1e39\n")));
  t.push_back(row("i42_l9_svmlight_bom_is_named", 239, run, 2, {"bad label '\\xef\\xbb\\xbf1'", "byte-order mark"},
                  {"svm/async-seed1/summary.json~failed"})
                  .cfg(svm_at("bom.svm"))
                  .before(write("bom.svm",
                                "\xef\xbb\xbf"
                                "1 1:0.5\n-1 2:1\n")));
  t.push_back(
      row("i42_l9_long_file_name_is_cut_not_refused", 239,
          "cp {cfg} {dir}/" + std::string(230, 'n') + ".json\n{bin} validate {dir}/" + std::string(230, 'n') + ".json",
          0, {"experiment '" + std::string(200, 'n') + "'"})
          .cfg(with(kBase, [](json& c) { c.erase("name"); })));
  t.push_back(row("i42_l9_overflow_seconds_are_short", 239,
                  run + " --set 'cluster.compute={\"dist\":\"pareto\",\"scale\":0.01,\"alpha\":0.5}' "
                        "--set cluster.workers=8 --set stop.updates=1000000",
                  2, {"drew a compute time of"})
                  .after([](Ctx& c) { EXPECT_EQ(c.output.find(".000000 s"), std::string::npos) << c.output; }));
}

std::vector<Row> rows() {
  std::vector<Row> t;
  const std::string run = "{bin} run {cfg} --quiet --out {out}";
  const std::string long_bg =  // a run of "base" that lasts until interrupted, in the background as $P
      "{bin} run {dir}/long.json --quiet --out {out} & P=$!\n"
      "wait_for {out}/base/async-seed1/meta.json || exit 99\n";

  // ---- 1. run ids that collide after sanitising
  t.push_back(refused(
      "d01_engine_labels_sanitise_alike", 1,
      with(
          kBase,
          [](json& c) {
            c["engines"] = json::parse(
                R"([{"type":"async","name":"async_div"},{"type":"async","name":"async div","lr_staleness":"divide"}])");
          }),
      {"engines[1]", "'async_div' and 'async div' both become 'async_div'"}));
  t.push_back(refused("d01_engine_names_with_slash_and_underscore", 1,
                      with(kBase,
                           [](json& c) {
                             c["engines"] =
                                 json::parse(R"([{"type":"async","name":"a_b"},{"type":"sync","name":"a/b"}])");
                           }),
                      {"'a_b' and 'a/b' both become 'a_b'"}));
  t.push_back(refused("d01_sweep_value_repeated", 1,
                      with(kBase,
                           [](json& c) {
                             c["sweep"] = {{"train.lr", {0.1, 0.1}}};
                           }),
                      {"sweep", "same point twice", "async-lr=0.1-seed1"}));
  t.push_back(refused("d01_sweep_strings_sanitise_alike", 1,
                      with(kBase,
                           [](json& c) {
                             c["sweep"] = {{"description", {"x y", "x_y"}}};
                           }),
                      {"sweep", "same run id 'async-description=x_y-seed1'", "\"x y\"", "\"x_y\""}));
  t.push_back(refused("d01_sweep_punctuation_alike", 1,
                      with(kBase,
                           [](json& c) {
                             c["sweep"] = {{"description", {"a:b", "a;b"}}};
                           }),
                      {"same run id 'async-description=a_b-seed1'"}));
  t.push_back(invalid("d01_validate_reports_collisions_too", 1,
                      with(kBase,
                           [](json& c) {
                             c["engines"] =
                                 json::parse(R"([{"type":"async","name":"p q"},{"type":"sync","name":"p_q"}])");
                           }),
                      {"both become 'p_q'"}));
  t.push_back(
      refused("d01_same_engine_twice", 0,
              with(kBase, [](json& c) { c["engines"] = json::parse(R"([{"type":"async"},{"type":"async"}])"); }),
              {"two engines are labelled 'async'"}));
  t.push_back(row("d01_distinct_labels_run", 1, run, 0, {},
                  {"base/a.b-seed1/summary.json", "base/a_b-seed1/summary.json", "base/index.csv#3"})
                  .cfg(with(kBase,
                            [](json& c) {
                              c["engines"] =
                                  json::parse(R"([{"type":"async","name":"a.b"},{"type":"async","name":"a_b"}])");
                            }))
                  .control());

  // ---- 2. a refused run must not touch the record; one process per experiment folder
  t.push_back(row("d02_refused_run_leaves_experiment_json", 2, run + " || exit 98\n" + run + " --set train.lr=0.05", 2,
                  {"holds a run of a different config"},
                  {"base/experiment.json~\"lr\": 0.1,", "base/experiment.json!~0.05"}));
  t.push_back(row("d02_second_process_is_refused_naming_the_holder", 2,
                  long_bg + run + "; rc=$?\nkill -INT $P; wait $P; exit $rc", 2,
                  {"experiment folder", "is in use by pid", "long.json", "--wait"},
                  {"base/experiment.json!~\"updates\": 200,", "!base/sync-seed1"}));
  t.push_back(row(
      "d02_wait_waits_for_the_holder", 2,
      long_bg + "{bin} run {dir}/sync.json --wait --supersede --out {out} > {dir}/second.txt 2>&1 & Q=$!\n"
                "wait_grep {dir}/second.txt 'waiting for' || exit 97\n"
                "kill -INT $P; wait $P; wait $Q; rc=$?; cat {dir}/second.txt\n"
                "grep -q interrupted {out}/base/superseded-*/async-seed1/summary.json || exit 96; exit $rc",
      0, {"waiting for", "in use by pid", "moved 1 run folder of another config", "sync-seed1: completed"},
      {"base/sync-seed1/summary.json~completed", "!base/async-seed1", "base/index.csv~sync-seed1,sync,1,completed"}));
  t.push_back(row("d02_wait_stops_at_ctrl_c", 2,
                  long_bg + "{bin} run {dir}/sync.json --wait --out {out} > {dir}/second.txt 2>&1 & Q=$!\n"
                            "wait_grep {dir}/second.txt 'waiting for' || exit 97\n"
                            "kill -INT $Q; wait $Q; rc=$?; kill -INT $P; wait $P; exit $rc",
                  130, {}, {"!base/sync-seed1"}));
  t.push_back(
      row("d02_two_configs_started_together", 2,
          "for i in 1 2 3; do rm -rf {out}\n"
          "  {bin} run {cfg} --quiet --out {out} > {dir}/a.txt 2>&1 & A=$!\n"
          "  {bin} run {cfg} --quiet --out {out} --set train.lr=0.05 > {dir}/b.txt 2>&1 & B=$!\n"
          "  wait $A; a=$?; wait $B; b=$?; cat {dir}/a.txt {dir}/b.txt; echo \"codes $a $b\"\n"
          "  lr_exp=$(grep -m1 '\"lr\"' {out}/base/experiment.json)\n"
          "  lr_run=$(grep -m1 '\"lr\"' {out}/base/async-seed1/config.json)\n"
          "  [ \"$lr_exp\" = \"$lr_run\" ] || { echo \"experiment.json says $lr_exp, the runs $lr_run\"; exit 3; }\n"
          "done",
          0, {"codes"})
          .cfg(with(kBase, [](json& c) { c["stop"]["updates"] = 20000; })));
  t.push_back(row("d02_rerun_removes_old_result_files", 2, run + " --trace || exit 98\n" + run + " --rerun", 0, {},
                  {"!base/async-seed1/trace.json", "base/async-seed1/metrics.csv", "base/async-seed1/summary.json"}));
  t.push_back(row("d02_supersede_moves_another_configs_run_aside", 2,
                  run + " || exit 98\n" + run +
                      " --supersede --set train.lr=0.05 || exit 97\n"
                      "grep -q '\"lr\": 0.1,' {out}/base/superseded-*/async-seed1/config.json || exit 96",
                  0, {"moved 2 run folders of another config"},
                  {"base/experiment.json~0.05", "base/async-seed1/config.json~0.05"}));
  // A changed sweep under the same name: the earlier sweep's run folders would be read
  // with the new ones (the analysis reads every run folder), so they are refused, or
  // moved aside with --supersede (never deleted).
  const std::string new_sweep = run + " --set 'engines=[{\"type\":\"async\"}]' --set 'sweep.train.lr=[0.1,0.2]'";
  t.push_back(
      row("d02_runs_of_another_sweep_are_refused", 2, run + " || exit 98\n" + new_sweep, 2,
          {"holds 2 run folders that this config does not make", "async-seed1, sync-seed1", "--supersede"},
          {"base/async-seed1/summary.json~completed", "base/experiment.json~\"sync\"", "!base/async-lr=0.2-seed1"}));
  t.push_back(
      row("d02_supersede_moves_runs_of_another_sweep_aside", 2,
          run + " || exit 98\n" + new_sweep +
              " --supersede 2> {dir}/err.txt || exit 97\ncat {dir}/err.txt\n"
              "ls {out}/base/superseded-*/async-seed1/summary.json {out}/base/superseded-*/sync-seed1/summary.json "
              "{out}/base/superseded-*/experiment.json > /dev/null || exit 96",
          0, {"moved 2 run folders of another config into", "/base/superseded-"},
          {"!base/async-seed1", "!base/sync-seed1", "base/async-lr=0.2-seed1/summary.json~completed",
           "base/index.csv!~sync-seed1", "base/index.csv#3"}));
  t.push_back(row("d02_shard_of_another_config_is_refused", 2,
                  run + " --shard 0/2 || exit 98\n" + run + " --shard 1/2 --set train.lr=0.05", 2, {"another config's"},
                  {"base/experiment.json!~0.05", "!base/sync-seed1"}));
  t.push_back(row("d02_shards_of_one_config_share_the_folder", 2,
                  run + " --shard 0/2 & A=$!\n" + run + " --shard 1/2; b=$?; wait $A; a=$?; exit $((a + b))", 0, {},
                  {"base/async-seed1/summary.json~completed", "base/sync-seed1/summary.json~completed"})
                  .control());
  t.push_back(row("d02_no_stale_lock_after_kill_9", 2,
                  long_bg + "kill -9 $P; wait $P\n{bin} run {dir}/sync.json --supersede --quiet --out {out}", 0, {},
                  {"base/sync-seed1/summary.json~completed"})
                  .control());

  // ---- 3. failed runs are marked; resume verifies the result files
  // A data set that validation finds (its files exist) but that fails when the run reads
  // it: a training-images file whose header promises 20 images and holds 5. (A missing
  // folder is refused before any run: e_missing_fashion_folder.)
  {
    std::vector<uint8_t> short_images = idx_images_header(20, 28, 28);
    short_images.resize(short_images.size() + 5 * 784, 9);
    t.push_back(row("d03_failed_run_says_failed", 3, run, 2, {"run async-seed1", "train-images"},
                    {"fm/async-seed1/summary.json~\"failed\"", "fm/async-seed1/summary.json~\"error\"",
                     "fm/async-seed1/summary.json~train-images", "fm/index.csv~async-seed1,async,1,failed"})
                    .cfg(kFashion)
                    .before(fashion_folder(short_images, 0)));
    std::vector<uint8_t> images = idx_images_header(20, 28, 28);
    images.resize(images.size() + 20 * 784, 9);
    t.push_back(row("d03_failed_run_is_rerun", 3,  // the data is mended after the first attempt
                    run +
                        "\ngrep -q failed {out}/fm/async-seed1/summary.json || exit 98\nrm -r {dir}/fm\nmv {dir}/later "
                        "{dir}/fm\n" +
                        run,
                    0,
                    // (5 gradients: the loss does not move, so the run's result is "stalled")
                    {}, {"fm/async-seed1/summary.json~stalled", "fm/index.csv!~failed"})
                    .cfg(kFashion)
                    .before([=](Ctx& c) {
                      fashion_folder(short_images, 0)(c);
                      fashion_folder(images, 0, "later")(c);
                    }));
  }
  for (const std::string file : {"metrics.csv", "workers.csv", "staleness.csv", "meta.json"})
    t.push_back(row("d03_resume_reruns_without_" + file.substr(0, file.find('.')), 3,
                    run + " || exit 98\nrm {out}/base/async-seed1/" + file + "\n{bin} run {cfg} --out {out}", 0,
                    {file + " is missing: re-running it", "sync-seed1: completed earlier, skipped"},
                    {"base/async-seed1/" + file}));
  t.push_back(row("d03_resume_reruns_a_truncated_metrics_csv", 3,
                  run + " || exit 98\nsed -i '$d' {out}/base/async-seed1/metrics.csv\n{bin} run {cfg} --out {out}", 0,
                  {"metrics.csv does not end at the summary's 200 updates"},
                  {"base/async-seed1/summary.json~completed"}));
  t.push_back(row("d03_summary_json_a_list", 3,
                  run + " || exit 98\necho '[1, 2]' > {out}/base/async-seed1/summary.json\n" + run, 0, {},
                  {"base/async-seed1/summary.json~completed", "base/index.csv#3"}));
  t.push_back(
      row("d03_summary_status_a_number", 3,
          run + " || exit 98\necho '{\"status\": 5, \"final\": 3}' > {out}/base/async-seed1/summary.json\n" + run, 0,
          {}, {"base/async-seed1/summary.json~completed"}));
  t.push_back(
      row("d03_summary_final_not_an_object_in_index", 3,  // index.csv reads the summary as it is
          run + " || exit 98\necho '{\"status\": \"completed\", \"final\": 3}' > {out}/base/sync-seed1/summary.json\n" +
              run + " --shard 0/2 --rerun",
          // (as `asgdsim run` would, index.csv does not count a summary without its run id as done)
          0, {}, {"base/index.csv#3", "base/index.csv~sync-seed1,sync,1,incomplete,nan,nan,nan,nan,nan"}));
  t.push_back(row(
      "d03_summary_nested_deep", 3,
      run + " || exit 98\npython3 -c \"print('['*200000 + ']'*200000)\" > {out}/base/async-seed1/summary.json\n" + run,
      0, {}, {"base/async-seed1/summary.json~completed"}));
  t.push_back(
      row("d03_interrupted_run_is_rerun", 0,  // the re-run starts by removing the old summary.json
          long_bg + "kill -INT $P; wait $P\ngrep -q interrupted {out}/base/async-seed1/summary.json || exit 98\n"
                    "{bin} run {dir}/long.json --quiet --out {out} & Q=$!\n"
                    "for i in $(seq 1 600); do [ -e {out}/base/async-seed1/summary.json ] || break; sleep 0.05; done\n"
                    "kill -INT $Q; wait $Q",
          130, {}, {"base/async-seed1/summary.json~interrupted"}));
  t.push_back(row("d03_completed_run_is_skipped", 3, run + " || exit 98\n{bin} run {cfg} --out {out}", 0,
                  {"async-seed1: completed earlier, skipped", "sync-seed1: completed earlier, skipped"})
                  .control());

  // ---- 4. temporary files: never written through, stale ones removed
  t.push_back(
      row("d04_planted_temp_symlinks_are_not_followed", 4,
          "mkdir -p {out}/base/async-seed1 {out}/base/sync-seed1; echo precious > {dir}/victim\n"
          "bash -c 'for d in async-seed1 sync-seed1; do for f in config.json meta.json metrics.csv staleness.csv "
          "workers.csv summary.json; do ln -s {dir}/victim {out}/base/$d/$f.tmp.$$; done; done\n"
          "for f in experiment.json index.csv; do ln -s {dir}/victim {out}/base/$f.tmp.$$; done\n"
          "exec {bin} run {cfg} --quiet --out {out}'",
          0, {}, {"{dir}/victim#1", "{dir}/victim~precious", "base/async-seed1/summary.json~completed"})
          .after([](Ctx& c) {
            EXPECT_FALSE(fs::is_symlink(c.out + "/base/async-seed1/config.json"));
            EXPECT_FALSE(fs::is_symlink(c.out + "/base/experiment.json"));
          }));
  t.push_back(row("d04_stale_temp_files_removed_on_resume", 4,
                  run +
                      " || exit 98\nrm {out}/base/async-seed1/summary.json\n"
                      "head -c 4000000 /dev/zero > {out}/base/async-seed1/metrics.csv.tmp.12345\n"
                      "echo x > {out}/base/async-seed1/summary.json.tmp.777.abc\n"
                      "echo x > {out}/base/experiment.json.tmp.999\n" +
                      run,
                  0, {},
                  {"!base/async-seed1/metrics.csv.tmp.12345", "!base/async-seed1/summary.json.tmp.777.abc",
                   "!base/experiment.json.tmp.999", "base/async-seed1/summary.json~completed"}));
  t.push_back(row("d04_a_symlink_at_the_target_is_replaced", 4,
                  "mkdir -p {out}/base/async-seed1; echo precious > {dir}/victim\n"
                  "ln -s {dir}/victim {out}/base/async-seed1/metrics.csv\n" +
                      run,
                  0, {}, {"{dir}/victim~precious", "{dir}/victim#1", "base/async-seed1/metrics.csv~time,updates"})
                  .control());

  // ---- 5. no path leaves --out
  t.push_back(row("d05_name_dot_dot_slash", 5,
                  "mkdir -p {dir}/o1/o2; {bin} run {cfg} --quiet --out {dir}/o1/o2 --set name=../../x", 2,
                  {"name", "'../../x'", "folder name"}, {"!{dir}/x", "!{dir}/o1/o2/x"}));
  t.push_back(refused("d05_name_dot_dot", 5, kBase, {"name", "'..'"}, "--set name=.."));
  t.push_back(refused("d05_name_dot", 5, kBase, {"name", "'.'"}, "--set name=."));
  t.push_back(refused("d05_name_empty", 5, kBase, {"name", "is empty"}, "--set 'name=\"\"'"));
  t.push_back(refused("d05_name_with_slash", 5, kBase, {"name", "'a/b'"}, "--set name=a/b"));
  t.push_back(
      refused("d05_name_too_long", 5, kBase, {"name", "longer than 200"}, "--set name=" + std::string(300, 'n')));
  t.push_back(refused("d05_run_id_too_long", 5,
                      with(kBase,
                           [](json& c) {
                             c["sweep"] = {{"description", {std::string(250, 'd')}}};
                           }),
                      {"too long for a folder name"}));
  t.push_back(
      row("d05_empty_out", 5, "{bin} run {cfg} --quiet --out ''", 2, {"--out is empty"}, {"!/asgd_hardening_empty_out"})
          .cfg(with(kBase, [](json& c) { c["name"] = "asgd_hardening_empty_out"; }))
          .after([](Ctx&) { fs::remove_all("/asgd_hardening_empty_out"); }));
  t.push_back(row("d05_name_from_file_is_sanitised", 5,
                  "cp {cfg} '{dir}/my exp.json'\n{bin} run '{dir}/my exp.json' --quiet --out {out}", 0, {},
                  {"my_exp/index.csv", "!my exp"})
                  .cfg(with(kBase, [](json& c) { c.erase("name"); })));

  // ---- 6. what cannot advance is refused; nothing spins
  t.push_back(refused("d06_eval_every_below_a_nanosecond", 6, kBase, {"eval.every", "1 ns"},
                      "--set 'eval={\"every\":1e-10,\"unit\":\"time\"}'"));
  t.push_back(invalid("d06_validate_eval_every_below_a_nanosecond", 6, kBase, {"eval.every"},
                      "--set 'eval={\"every\":1e-10,\"unit\":\"time\"}'"));
  t.push_back(row("d06_eval_every_1e-17_epochs_ends", 6, run + " --set 'eval={\"every\":1e-17}' --set stop.updates=50",
                  0, {}, {"base/async-seed1/metrics.csv#52", "base/sync-seed1/summary.json~completed"})
                  .limit(30));
  t.push_back(refused("d06_zero_compute_with_only_stop_time", 6, kBase, {"stop.time", "can never reach it", "0 ns"},
                      "--set 'cluster.compute={\"dist\":\"constant\",\"value\":0}' --set 'stop={\"time\":1}'"));
  t.push_back(refused("d06_picosecond_compute_with_only_stop_time", 6, kBase, {"stop.time", "can never reach it"},
                      "--set 'cluster.compute={\"dist\":\"constant\",\"value\":1e-12}' --set 'stop={\"time\":1}'"));
  t.push_back(refused("d06_tiny_exponential_with_only_stop_time", 6, kBase, {"stop.time"},
                      "--set 'cluster.compute={\"dist\":\"exponential\",\"mean\":1e-13}' --set 'stop={\"time\":1}'"));
  t.push_back(row("d06_zero_compute_with_stop_updates_runs", 6,
                  run + " --set 'cluster.compute={\"dist\":\"constant\",\"value\":0}'", 0, {},
                  {"base/async-seed1/summary.json~completed"})
                  .control());
  t.push_back(row("d06_zero_compute_with_latency_reaches_stop_time", 6,
                  run + " --set 'cluster.compute={\"dist\":\"constant\",\"value\":0}' --set 'stop={\"time\":0.05}' "
                        "--set cluster.network.latency=0.001",
                  0, {}, {"base/async-seed1/summary.json~reached stop.time"})
                  .control());
  t.push_back(row("d06_eval_every_nanosecond_is_fine", 6,
                  run + " --set 'eval={\"every\":1e-9,\"unit\":\"time\"}' --set 'stop={\"time\":2e-7}' "
                        "--set 'cluster.compute={\"dist\":\"constant\",\"value\":1e-8}'",
                  // no update lands within 2e-7 s (the messages take longer): "stalled", not "completed"
                  0, {}, {"base/async-seed1/summary.json~stalled"})
                  .control());
  t.push_back(row("d06_ctrl_c_while_making_data", 6,
                  "{bin} run {cfg} --quiet --out {out} & P=$!\n"
                  "wait_for {out}/big/async-seed1/meta.json || exit 99\nsleep 0.3; kill -INT $P\n"
                  "s=$(date +%s); wait $P; rc=$?; e=$(( $(date +%s) - s )); echo \"stopped after ${e}s\"\n"
                  "[ $e -le 8 ] || exit 3; exit $rc",
                  130, {}, {"big/async-seed1/summary.json~interrupted", "big/index.csv~interrupted"})
                  .cfg(json::parse(R"({"name": "big", "model": {"type": "softmax"}, "data": {"type": "synthetic",
                      "features": 200, "classes": 1000, "train_samples": 200000, "test_samples": 10},
                      "stop": {"updates": 5}, "engines": [{"type": "async"}]})")));
  // (issue #31: the sparse generator's loop did not poll; this one takes about 45 s)
  t.push_back(row("d06_ctrl_c_while_making_sparse_data", 6,
                  "{bin} run {cfg} --quiet --out {out} & P=$!\n"
                  "wait_for {out}/bigsp/async-seed1/meta.json || exit 99\nsleep 0.3; kill -INT $P\n"
                  "s=$(date +%s); wait $P; rc=$?; e=$(( $(date +%s) - s )); echo \"stopped after ${e}s\"\n"
                  "[ $e -le 8 ] || exit 3; exit $rc",
                  130, {}, {"bigsp/async-seed1/summary.json~interrupted", "bigsp/index.csv~interrupted"})
                  .cfg(json::parse(R"({"name": "bigsp", "model": {"type": "sparse_softmax"}, "data": {"type":
                      "sparse_synthetic", "features": 10000, "nnz": 10, "classes": 1000, "train_samples": 200000,
                      "test_samples": 10}, "stop": {"updates": 1}, "engines": [{"type": "async"}]})")));

  // ---- 7. the int64 nanosecond clock
  t.push_back(refused("d07_stop_time_1e10", 7, kBase, {"stop.time", "[0, 1000000000]"}, "--set stop.time=1e10"));
  t.push_back(refused("d07_constant_compute_3e9", 7, kBase, {"cluster.compute.value"},
                      "--set 'cluster.compute={\"dist\":\"constant\",\"value\":3e9}' --set stop.updates=10"));
  t.push_back(refused("d07_eval_every_1e10_seconds", 7, kBase, {"eval.every"},
                      "--set 'eval={\"every\":1e10,\"unit\":\"time\"}'"));
  t.push_back(refused("d07_failure_at_1e10", 7, kBase, {"cluster.failures.events[0].at"},
                      "--set 'cluster.failures={\"events\":[{\"worker\":0,\"at\":1e10}]}'"));
  t.push_back(refused("d07_down_for_1e10", 7, kBase, {"down_for"},
                      "--set 'cluster.failures={\"events\":[{\"worker\":0,\"at\":1,\"down_for\":1e10}]}'"));
  t.push_back(refused("d07_slow_window_from_1e10", 7, kBase, {"cluster.stragglers.slow[0].from"},
                      "--set 'cluster.stragglers={\"slow\":[{\"worker\":0,\"factor\":2,\"from\":1e10}]}'"));
  t.push_back(refused("d07_latency_1e10", 7, kBase, {"cluster.network.latency"}, "--set cluster.network.latency=1e10"));
  t.push_back(refused("d07_failure_down_time_1e10", 7, kBase, {"cluster.failures.down_time"},
                      "--set 'cluster.failures={\"rate\":0.1,\"down_time\":1e10}'"));
  t.push_back(row("d07_heavy_tail_overflows_during_the_run", 7,
                  run + " --set 'cluster.compute={\"dist\":\"pareto\",\"scale\":0.01,\"alpha\":0.5}' "
                        "--set cluster.workers=8 --set stop.updates=1000000",
                  2, {"virtual time overflow", "run async-seed1", "drew a compute time", "lighter tail"},
                  {"base/async-seed1/summary.json~\"failed\"", "base/index.csv~async-seed1,async,1,failed"}));
  t.push_back(row(
      "d07_sum_of_long_steps_overflows", 7,
      run + " --set 'cluster.compute={\"dist\":\"constant\",\"value\":1e9,\"per\":\"step\"}' --set stop.updates=30 "
            "--set 'engines=[{\"type\":\"async\"}]'",
      2, {"virtual time overflow", "outside the virtual clock's range"}, {"base/async-seed1/summary.json~\"failed\""}));
  t.push_back(row("d07_rare_failures_beyond_the_clock_never_happen", 7,
                  run + " --set 'cluster.failures={\"rate\":1e-15}'", 0, {},
                  {"base/async-seed1/summary.json~\"worker_failures\": 0"}));
  t.push_back(row("d07_trace_value_beyond_the_limit", 7,
                  "printf '0.01\\n1e10\\n' > {dir}/trace.txt\n" + run +
                      " --set 'cluster.compute={\"dist\":\"trace\",\"file\":\"trace.txt\"}'",
                  2, {"trace.txt line 2", "more than 1000000000 s"}, {"EMPTY"}));
  t.push_back(row("d07_tiny_bandwidth_overflows", 7, run + " --set cluster.network.bandwidth=1e-10", 2,
                  {"virtual time overflow"}, {"base/async-seed1/summary.json~\"failed\""}));

  // ---- 8. every number fits the type it is stored in
  t.push_back(refused("d08_tau_2_to_32", 8, kBase, {"staleness.tau", "2147483647"},
                      "--set 'staleness={\"mode\":\"fixed\",\"tau\":4294967296}'"));
  t.push_back(refused("d08_tau_2_to_31", 8, kBase, {"staleness.tau"},
                      "--set 'staleness={\"mode\":\"uniform\",\"tau\":2147483648}'"));
  t.push_back(refused("d08_geometric_mean_1e300", 8, kBase, {"staleness.mean", "100000000"},
                      "--set 'staleness={\"mode\":\"geometric\",\"mean\":1e300}'"));
  t.push_back(refused("d08_geometric_max_2_to_32", 8, kBase, {"staleness.max"},
                      "--set 'staleness={\"mode\":\"geometric\",\"mean\":2,\"max\":4294967296}'"));
  t.push_back(refused("d08_hidden_2_to_32_plus_1", 8, kTiny, {"model.hidden", "2147483647"},
                      "--set 'model={\"type\":\"mlp\",\"hidden\":[4294967297]}'"));
  t.push_back(refused("d08_eval_every_1e20_updates", 8, kBase, {"eval.every"},
                      "--set 'eval={\"every\":1e20,\"unit\":\"updates\"}'"));
  t.push_back(refused("d08_eval_every_fractional_updates", 8, kBase, {"eval.every", "whole number"},
                      "--set 'eval={\"every\":2.5,\"unit\":\"updates\"}'"));
  t.push_back(refused("d08_seed_2_to_60", 8, kBase, {"seed"}, "--set seed=1152921504606846976"));
  t.push_back(refused("d08_batch_size_2_to_31", 8, kBase, {"train.batch_size"}, "--set train.batch_size=2147483648"));
  t.push_back(refused("d08_global_batch_too_large_per_worker", 8, kBase, {"train.global_batch", "per worker"},
                      "--set train.global_batch=100000000"));
  t.push_back(refused("d08_data_samples_2_to_40", 8, kBase, {"data.samples"}, "--set data.samples=1099511627776"));
  t.push_back(refused("d08_backups_2_to_32", 8, kBase, {"engines[0].backups"},
                      "--set 'engines=[{\"type\":\"sync_backup\",\"backups\":4294967296}]'")
                  .control());
  t.push_back(refused("d08_period_2_to_40", 8, kBase, {"engines[0].period"},
                      "--set 'engines=[{\"type\":\"easgd\",\"period\":1099511627776}]'"));
  t.push_back(refused("d08_failure_worker_2_to_32", 8, kBase, {"cluster.failures.events[0].worker"},
                      "--set 'cluster.failures={\"events\":[{\"worker\":4294967296,\"at\":1}]}'")
                  .control());
  t.push_back(refused("d08_stop_updates_huge", 0, kBase, {"stop.updates"}, "--set stop.updates=1e300"));
  t.push_back(refused("d08_workers_fractional", 0, kBase, {"cluster.workers", "integer"}, "--set cluster.workers=2.5"));
  t.push_back(refused("d08_classes_1001", 0, kTiny, {"data.classes", "[2, 1000]"}, "--set data.classes=1001"));

  // ---- 9. memory: estimated up front, refused naming the key
  t.push_back(refused("d09_workers_documented_max", 9, kBase, {"cluster.workers", "[1, 1000000]"},
                      "--set cluster.workers=16777215"));
  t.push_back(refused("d09_workers_times_model", 9, kBase, {"cluster.workers", "would need about", "GiB", "Lower"},
                      "--set cluster.workers=1000000 --set model.dim=100000000"));
  t.push_back(
      row("d09_repeats_1e6", 9, "{bin} validate {cfg} --set repeats=1000000", 2, {"repeats", "[1, 50000]"}, {"EMPTY"}));
  t.push_back(invalid("d09_sweep_product_too_many_runs", 9,
                      with(kBase,
                           [](json& c) {
                             json lrs = json::array();
                             for (int i = 1; i <= 300; ++i) lrs.push_back(0.001 * i);
                             c["sweep"] = {{"train.lr", lrs}};
                             c["repeats"] = 100;
                           }),
                      {"makes 60000 runs", "2 engine(s) x 300 train.lr x 100 repeat(s)", "more than 50000"}));
  t.push_back(refused("d09_batch_size_1e9", 9, kBase, {"train.batch_size"}, "--set train.batch_size=1000000000"));
  t.push_back(refused("d09_hidden_layers_too_large", 9, kTiny, {"model", "would need about"},
                      "--set 'model={\"type\":\"mlp\",\"hidden\":[1000000000,1000000000]}'"));
  t.push_back(refused("d09_synthetic_data_too_large", 9, kTiny, {"data", "would need about"},
                      "--set data.features=100000 --set data.train_samples=100000000"));
  t.push_back(refused("d09_metrics_rows_too_many", 9, kBase, {"eval.every", "metrics rows"},
                      "--set 'eval={\"every\":1e-9,\"unit\":\"time\"}' --set 'stop={\"time\":1e8}'"));
  t.push_back(refused("d09_trace_spans_too_many", 9, kBase, {"trace", "trace spans"},
                      "--set trace=true --set stop.updates=100000000000000"));
  t.push_back(refused("d09_staleness_history_too_large", 9, kBase, {"staleness.tau", "parameter versions"},
                      "--set model.dim=100000000 --set 'staleness={\"mode\":\"fixed\",\"tau\":100000}' "
                      "--set stop.updates=1000000"));
  t.push_back(row("d09_jobs_side_by_side_too_large", 9,  // each run fits in 2.5 GB, two at once do not
                  "ulimit -v 2500000\n" + run + " --jobs 2 --set model.dim=60000000 --set stop.updates=5", 2,
                  {"--jobs", "2 runs side by side would need about", "lower --jobs"},
                  {"!base/experiment.json", "!base/async-seed1"})
                  .no_sanitizer());
  t.push_back(row("d09_idx_header_too_large", 9, run, 2, {"train-images-idx3-ubyte.gz", "more than the 1024 MiB"},
                  {"fm/async-seed1/summary.json~\"failed\""})
                  .cfg(kFashion)
                  .before(fashion_folder(idx_images_header(2000000, 28, 28), 0)));
  // (train_limit and test_limit: the memory estimate, which counts what the address space
  // already holds, would refuse the full 60,000 images under 600 MB before the file is read)
  t.push_back(row("d09_idx_gzip_bomb_is_not_inflated", 9,
                  "ulimit -v 600000\n" + run + " --set data.train_limit=20 --set data.test_limit=10", 2,
                  {"unexpected bytes after the last item"}, {"fm/async-seed1/summary.json~\"failed\""})
                  .cfg(kFashion)
                  .before(fashion_folder(idx_images_header(20, 28, 28), size_t(900) << 20))
                  .no_sanitizer()
                  .not_on_cuda());
  t.push_back(row("d09_compute_file_dev_zero", 9,
                  run + " --set 'cluster.compute={\"dist\":\"trace\",\"file\":\"/dev/zero\"}'", 2,
                  {"/dev/zero line 1", "longer than 1024 bytes"}, {"EMPTY"}));
  t.push_back(row("d09_config_file_dev_zero", 9, "{bin} validate /dev/zero", 2, {"/dev/zero", "larger than 64 MiB"}));
  t.push_back(row("d09_trace_line_too_long", 9,
                  "head -c 5000 /dev/zero | tr '\\0' 1 > {dir}/long.txt\n" + run +
                      " --set 'cluster.compute={\"dist\":\"trace\",\"file\":\"long.txt\"}'",
                  2, {"long.txt line 1", "longer than 1024"}, {"EMPTY"}));

  // ---- 10. threads and nesting
  t.push_back(row("d10_threads_100000", 10, run + " --threads 100000", 2, {"--threads", "0..1024"}, {"EMPTY"}));
  t.push_back(row("d10_jobs_5000", 10, run + " --jobs 5000", 2, {"--jobs", "1..1024"}, {"EMPTY"}));
  t.push_back(row("d10_threads_negative", 0, run + " --threads -1", 2, {"--threads"}, {"EMPTY"}));
  t.push_back(row("d10_jobs_zero", 0, run + " --jobs 0", 2, {"--jobs"}, {"EMPTY"}));
  t.push_back(row("d10_thread_creation_failure_is_an_error", 10,
                  "ulimit -v 2500000\nOPENBLAS_NUM_THREADS=1 " + run + " --threads 1000", 1,
                  {"cannot start 999 worker threads", "use fewer --threads"},
                  {"base/index.csv~pending", "!base/async-seed1/summary.json"})
                  .no_sanitizer());
  t.push_back(row("d10_threads_1000_run", 10, run + " --threads 1000", 0, {}, {"base/index.csv~completed"}).control());
  t.push_back(row("d10_json_nested_100000_deep", 10,
                  "python3 -c \"print('['*100000 + ']'*100000)\" > {dir}/deep.json\n{bin} validate {dir}/deep.json", 2,
                  {"nested deeper than 64 levels"}));
  t.push_back(
      row("d10_json_nested_deep_in_config", 10,
          "python3 -c \"print('{\\\"model\\\": {\\\"type\\\": \\\"quadratic\\\"}, \\\"engines\\\": [{\\\"type\\\": "
          "\\\"async\\\"}], \\\"description\\\": ' + '{\\\"a\\\":'*5000 + '1' + '}'*5001)\" > {dir}/deep.json\n"
          "{bin} validate {dir}/deep.json",
          2, {"nested deeper than 64 levels", "description.a.a"}));
  t.push_back(row("d10_json_nested_deep_in_set", 10,
                  "{bin} validate {cfg} --set \"description=$(python3 -c \"print('['*60000 + ']'*60000)\")\"", 2,
                  {"--set description", "nested deeper"}));
  t.push_back(invalid("d10_json_nested_a_little_is_a_type_error", 0, kBase, {"description", "expected a string"},
                      "--set 'description=[[[[[[[[1]]]]]]]]'"));

  // ---- 11. a repeated key is an error
  t.push_back(
      row("d11_repeated_engines", 11, "{bin} validate {cfg}", 2, {"key \"engines\" appears twice"})
          .cfg_text(
              R"({"model": {"type": "quadratic"}, "engines": [{"type": "async"}], "engines": [{"type": "sync"}]})"));
  t.push_back(
      row("d11_repeated_key_in_an_engine", 11, "{bin} validate {cfg}", 2,
          {"key \"type\" appears twice", "engines[1].type"})
          .cfg_text(
              R"({"model": {"type": "quadratic"}, "engines": [{"type": "async"}, {"type": "async", "type": "sync"}]})"));
  t.push_back(
      row("d11_repeated_key_nested", 11, run, 2, {"key \"workers\" appears twice", "cluster.workers"}, {"EMPTY"})
          .cfg_text(R"({"model": {"type": "quadratic"}, "cluster": {"workers": 2, "workers": 8},
                                "engines": [{"type": "async"}]})"));
  t.push_back(invalid("d11_repeated_key_in_set", 11, kBase, {"--set engines", "appears twice"},
                      "--set 'engines=[{\"type\":\"async\",\"type\":\"sync\"}]'"));
  t.push_back(row("d11_repeated_key_with_comments", 11, "{bin} validate {cfg}", 2, {"key \"seed\" appears twice"})
                  .cfg_text("{\"seed\": 1, // the seed\n \"seed\": 2, \"model\": {\"type\": \"quadratic\"}, "
                            "\"engines\": [{\"type\": \"async\"}]}"));
  t.push_back(invalid("d11_key_in_another_case_is_unknown", 0,
                      with(kBase, [](json& c) { c["Engines"] = c["engines"]; }), {"Engines", "unknown key"}));

  // ---- 12. signals
  t.push_back(row("d12_sighup_is_an_interruption", 12, long_bg + "kill -HUP $P; wait $P", 130, {},
                  {"base/async-seed1/summary.json~interrupted", "base/index.csv~async-seed1,async,1,interrupted"}));
  t.push_back(row("d12_sigterm_is_an_interruption", 0, long_bg + "kill -TERM $P; wait $P", 130, {},
                  {"base/async-seed1/summary.json~interrupted", "base/index.csv~interrupted"}));
  t.push_back(row("d12_sigint_is_an_interruption", 0, long_bg + "kill -INT $P; wait $P", 130, {},
                  {"base/async-seed1/summary.json~interrupted", "base/async-seed1/metrics.csv"}));
  t.push_back(row("d12_closed_stdout_stops_printing_not_running", 12,
                  "set -o pipefail\n{bin} run {cfg} --out {out} | head -1", 0, {"[1/4]"},
                  {"base/index.csv#5", "base/index.csv!~pending", "base/easgd-seed1/summary.json~completed"})
                  .cfg(kFour));

  // ---- 13. exit 2 where the input is at fault
  t.push_back(row("d13_idx_of_zero_images", 13, run, 2, {"holds no images"}, {"fm/async-seed1/summary.json~failed"})
                  .cfg(kFashion)
                  .before(fashion_folder(idx_images_header(0, 28, 28), 0)));
  t.push_back(refused("d13_set_not_utf8", 13, kBase, {"--set description", "not valid UTF-8", "0xff"},
                      "--set description=$'\\xff\\xfe'"));
  t.push_back(invalid("d13_validate_set_not_utf8", 13, kBase, {"not valid UTF-8"}, "--set description=$'\\xff\\xfe'"));
  t.push_back(row("d13_cluster_without_mpirun", 13, "{bin} cluster {cfg} --out {out}", 2,
                  {"mpirun -np N+1", "not started by mpirun"}, {"EMPTY"}));
  t.push_back(row("d13_out_not_utf8", 13, "{bin} run {cfg} --quiet --out {out}/$'\\xff'", 0, {}).after([](Ctx& c) {
    json meta = json::parse(read_file(c.out + "/\xff/base/async-seed1/meta.json"));
    EXPECT_NE(meta["command_line"].get<std::string>().find("?"), std::string::npos);
  }));
  t.push_back(row("d13_config_file_name_not_utf8", 13,
                  "cp {cfg} {dir}/$'\\xff'.json\n{bin} run {dir}/$'\\xff'.json --quiet --out {out}", 0, {},
                  {"_/index.csv"})
                  .cfg(with(kBase, [](json& c) { c.erase("name"); })));
  t.push_back(row("d13_config_not_utf8", 0,
                  "printf '{\"name\": \"\\xff\"}' > {dir}/bad.json\n{bin} validate {dir}/bad.json", 2,
                  {"bad.json", "syntax error"}));

  // ---- 14. plot.py: unreadable files are warned about and listed
  t.push_back(row("d14_plot_corrupt_metrics_and_summary", 14,
                  run + " || exit 98\nprintf '\\x00garbage\\xff\\n1,2\\n' > {out}/base/async-seed1/metrics.csv\n"
                        "echo '[1, 2]' > {out}/base/sync-seed1/summary.json\n"
                        "/usr/bin/python3 {src}/analysis/plot.py {out}/base --format png",
                  0, {"warning: ignoring", "async-seed1/metrics.csv", "not a JSON object"},
                  {"base/report.md~Runs with problems", "base/report.md~async-seed1: metrics.csv ignored",
                   "base/report.md~sync-seed1: summary.json ignored", "base/report.html~Runs with problems"})
                  .limit(120));
  t.push_back(row("d14_plot_lists_failed_runs", 14,
                  run + " --set 'cluster.compute={\"dist\":\"pareto\",\"scale\":0.01,\"alpha\":0.5}' --set "
                        "stop.updates=1000000 --set cluster.workers=8\n"
                        "/usr/bin/python3 {src}/analysis/plot.py {out}/base --format png",
                  0, {}, {"base/report.md~async-seed1: failed: worker", "base/report.md~1 failed"})
                  .limit(120));

  // ---- earlier bad-input cases (tests/test_config.cpp, tests/test_engines.cpp, the fuzzer's findings)
  auto tiny = [](const std::function<void(json&)>& edit) { return with(kTiny, edit); };
  t.push_back(row("e_malformed_json", 0, run, 2, {"line 2", "column"}, {"EMPTY"})
                  .cfg_text("{\"name\": \"x\",\n  \"seed\": 1,,\n}"));
  t.push_back(refused("e_unknown_key", 0, tiny([](json& c) { c["colour"] = "red"; }), {"colour", "unknown key"}));
  t.push_back(refused("e_misspelled_key", 0, tiny([](json& c) { c["train"]["lrr"] = 0.1; }),
                      {"train.lrr", "did you mean 'lr'"}));
  t.push_back(refused("e_wrong_type", 0, tiny([](json& c) { c["train"]["batch_size"] = "big"; }),
                      {"train.batch_size", "integer"}));
  t.push_back(refused("e_negative_lr", 0, tiny([](json& c) { c["train"]["lr"] = -0.1; }), {"train.lr", "> 0"}));
  t.push_back(refused("e_workers_zero", 0, tiny([](json& c) { c["cluster"]["workers"] = 0; }), {"cluster.workers"}));
  t.push_back(
      refused("e_empty_engines", 0, tiny([](json& c) { c["engines"] = json::array(); }), {"engines", "non-empty"}));
  t.push_back(refused("e_unknown_engine", 0, tiny([](json& c) { c["engines"][0]["type"] = "asyncc"; }),
                      {"engines[0].type", "did you mean 'async'"}));
  t.push_back(refused("e_sweep_over_a_missing_key", 0, tiny([](json& c) {
                        c["sweep"] = {{"train.lrate", {0.1, 0.2}}};
                      }),
                      {"sweep.train.lrate", "unknown key"}));
  t.push_back(refused("e_backups_negative", 0, tiny([](json& c) {
                        c["engines"][0] = {{"type", "sync_backup"}, {"backups", -1}};
                      }),
                      {"engines[0].backups"}));
  t.push_back(refused("e_backups_at_least_workers", 0, tiny([](json& c) {
                        c["engines"][0] = {{"type", "sync_backup"}, {"backups", 2}};
                      }),
                      {"engines[0].backups", "< cluster.workers"}));
  t.push_back(refused("e_period_zero", 0, tiny([](json& c) {
                        c["engines"][0] = {{"type", "easgd"}, {"period", 0}};
                      }),
                      {"engines[0].period"}));
  t.push_back(refused("e_alpha_out_of_range", 0, tiny([](json& c) {
                        c["engines"][0] = {{"type", "easgd"}, {"alpha", 1.5}};
                      }),
                      {"engines[0].alpha", "[0, 1]"}));
  t.push_back(refused("e_negative_distribution_parameter", 0, tiny([](json& c) {
                        c["cluster"]["compute"] = {{"dist", "exponential"}, {"mean", -1}};
                      }),
                      {"cluster.compute.mean"}));
  t.push_back(refused("e_missing_distribution_parameter", 0, tiny([](json& c) {
                        c["cluster"]["compute"] = {{"dist", "pareto"}, {"scale", 1}};
                      }),
                      {"cluster.compute.alpha", "missing"}));
  t.push_back(refused("e_model_data_mismatch", 0, tiny([](json& c) {
                        c["model"] = {{"type", "linear"}};
                      }),
                      {"data", "regression"}));
  t.push_back(refused("e_set_without_value", 0, kTiny, {"KEY.PATH=VALUE"}, "--set train.lr"));
  t.push_back(refused("e_set_to_a_bad_value", 0, kTiny, {"train.momentum"}, "--set train.momentum=2"));
  t.push_back(
      refused("e_batched_gradients_zero", 0, kTiny, {"batched_gradients", "[1, 1024]"}, "--set batched_gradients=0"));
  t.push_back(row("e_unwritable_out", 0, "{bin} run {cfg} --quiet --out /proc/asgd_cannot_write", 2,
                  {"/proc/asgd_cannot_write"})
                  .cfg(kTiny));
  t.push_back(invalid("e_fuzz_model_type_a_number", 0,
                      json::parse(R"({"model": {"type": 2}, "engines": [{"type": "async"}]})"), {"model.type"}));
  t.push_back(invalid("e_fuzz_name_a_number", 0,
                      json::parse(R"({"name": 5, "model": {"type": "softmax"}, "engines": [{"type": "async"}]})"),
                      {"name"}));
  t.push_back(invalid("e_fuzz_classes_a_string", 0,
                      json::parse(R"({"model": {"type": "logistic"}, "data": {"type": "synthetic", "classes": "two"},
                                      "engines": [{"type": "async"}]})"),
                      {"data.classes"}));
  t.push_back(invalid("e_fuzz_mode_a_number", 0,
                      json::parse(R"({"model": {"type": "quadratic"}, "engines": [{"type": "easgd", "mode": 7}]})"),
                      {"engines[0].mode"}));
  t.push_back(
      row("e_fuzz_number_literal_too_large", 0, "{bin} validate {cfg}", 2, {"unreadable JSON", "number overflow"})
          .cfg_text(
              R"({"seed": 7700000000000000001E824712669162, "model": {"type": "quadratic"}, "engines": [{"type": "async"}]})"));
  t.push_back(invalid("e_fuzz_seed_1e999_in_set", 0, kBase, {"seed"}, "--set seed=1e999"));
  t.push_back(row("e_usage_no_command", 0, "{bin}", 2, {"missing command", "usage"}));
  t.push_back(row("e_usage_unknown_command", 0, "{bin} frobnicate", 2, {"unknown command 'frobnicate'"}));
  t.push_back(row("e_usage_run_without_config", 0, "{bin} run", 2, {"missing CONFIG.json"}));
  t.push_back(row("e_usage_unknown_flag", 0, "{bin} run {cfg} --no-such-flag", 2, {"no-such-flag"}, {"EMPTY"}));
  t.push_back(row("e_usage_missing_config_file", 0, "{bin} run /nonexistent/c.json", 2,
                  {"/nonexistent/c.json", "cannot open"}));
  t.push_back(row("e_usage_bad_shard", 0, run + " --shard 3/2", 2, {"--shard '3/2'"}, {"EMPTY"}));
  t.push_back(row("e_usage_cluster_with_threads", 0, "{bin} cluster {cfg} --threads 2", 2,
                  {"--threads and --jobs do not apply"}));
  // refused by validation, before anything is written (issue 32: validate checks the data)
  t.push_back(row("e_missing_fashion_folder", 0, run, 2, {"data.path", "nowhere", "dataset-fashion-mnist"}, {"EMPTY"})
                  .cfg(tiny([](json& c) {
                    c["model"] = {{"type", "mlp"}, {"hidden", {8}}};
                    c["data"] = {{"type", "fashion_mnist"}, {"path", "nowhere"}};
                  })));
  t.push_back(row("e_different_config_refused_without_supersede", 0,
                  run + " || exit 98\n" + run + " --set train.lr=0.3", 2,
                  {"holds a run of a different config", "--supersede"}, {"base/async-seed1/config.json!~0.3"}));
  t.push_back(row("e_divergence_is_a_result", 0, run + " --set train.lr=5 --set 'engines=[{\"type\":\"async\"}]'", 0,
                  {}, {"base/async-seed1/summary.json~diverged"}));
  issue31_rows(t);
  issue42_rows(t);
  return t;
}

const std::string kPrelude = R"(set -u
wait_for() { for i in $(seq 1 1200); do [ -e "$1" ] && return 0; sleep 0.05; done; echo "wait_for $1: timed out"; return 1; }
wait_grep() { for i in $(seq 1 1200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; echo "wait_grep $1 $2: timed out"; return 1; }
)";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t i = 0; (i = s.find(from, i)) != std::string::npos; i += to.size()) s.replace(i, from.size(), to);
  return s;
}

std::string binary_under_test() {
  const char* b = std::getenv("ASGD_HARDENING_BINARY");
  return b && *b ? b : asgd::testing::binary();
}
std::string source_under_test() {  // for analysis/plot.py
  const char* s = std::getenv("ASGD_HARDENING_SOURCE");
  return s && *s ? s : asgd::testing::source_dir();
}

// Every path under `dir` (relative), files and folders.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::exists(dir)) return out;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    out.push_back(fs::relative(it->path(), dir).string());
  return out;
}

void check_state(const std::string& entry, const Ctx& c) {
  if (entry == "EMPTY") {
    EXPECT_EQ(entries(c.out), std::vector<std::string>{}) << "expected nothing written under " << c.out;
    return;
  }
  auto path_of = [&](std::string p) {
    p = replace_all(p, "{dir}", c.dir);
    return p[0] == '/' ? p : c.out + "/" + p;
  };
  size_t at;
  if (entry[0] == '!' && entry.find('~') == std::string::npos) {
    EXPECT_FALSE(fs::exists(fs::symlink_status(path_of(entry.substr(1))))) << entry << " should not exist";
  } else if ((at = entry.find("!~")) != std::string::npos) {
    std::string text = read_file(path_of(entry.substr(0, at)));
    EXPECT_EQ(text.find(entry.substr(at + 2)), std::string::npos) << entry << ":\n" << text.substr(0, 2000);
  } else if ((at = entry.find('~')) != std::string::npos) {
    const std::string path = path_of(entry.substr(0, at));
    ASSERT_TRUE(fs::exists(path)) << path << " is missing (" << entry << ")";
    std::string text = read_file(path);
    EXPECT_NE(text.find(entry.substr(at + 1)), std::string::npos) << entry << ":\n" << text.substr(0, 2000);
  } else if ((at = entry.rfind('#')) != std::string::npos) {
    const std::string path = path_of(entry.substr(0, at));
    std::string text = read_file(path);
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), std::stol(entry.substr(at + 1))) << path << ":\n"
                                                                                           << text.substr(0, 2000);
  } else {
    EXPECT_TRUE(fs::exists(path_of(entry))) << entry << " should exist";
  }
}

// Runs `bash script` in a process group of its own, stdout and stderr together; after
// `seconds` the whole group is killed (exit 137), and when bash exits, whatever it left
// running in the background is killed too, so no row can outlive its test.
CommandResult run_script(const std::string& script, double seconds) {
  CommandResult r;
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return r;
  const std::string bash = "/bin/bash";
  std::vector<char*> argv = {const_cast<char*>(bash.c_str()), const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(out[1], STDERR_FILENO);
    ::execv(bash.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  if (pid < 0) {
    ::close(out[0]);
    return r;
  }
  ::setpgid(pid, pid);  // as the child does: whichever runs first
  ::fcntl(out[0], F_SETFL, O_NONBLOCK);
  auto drain = [&] {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(out[0], buf, sizeof(buf))) > 0) r.output.append(buf, size_t(n));
  };
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  bool timed_out = false;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    drain();
    if (std::chrono::steady_clock::now() > until) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      timed_out = true;
      break;
    }
    ::usleep(5000);
  }
  ::kill(-pid, SIGKILL);  // what the script left in the background
  ::usleep(20000);
  drain();
  ::close(out[0]);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (timed_out) r.output += "\n[row timed out after " + std::to_string(int(seconds)) + " s]";
  return r;
}

class BadInput : public ::testing::TestWithParam<Row> {};

TEST_P(BadInput, Row) {
  const Row& r = GetParam();
  if (r.unsanitized_only && ASGD_SANITIZED) GTEST_SKIP() << "needs ulimit -v, which a sanitizer cannot run under";
  if (r.host_backend_only && on_cuda())
    GTEST_SKIP() << "its ulimit -v is below the address space the CUDA libraries map when they load";
  Ctx c;
  c.dir = temp_dir("hard");
  c.out = c.dir + "/out";
  c.cfg = c.dir + "/c.json";
  write_text(c.cfg, r.config);
  write_text(c.dir + "/long.json", with(kBase, [](json& j) {
                                     j["stop"]["updates"] = 100000000;
                                     j["eval"] = {{"every", 100000}, {"unit", "updates"}};
                                     j["engines"] = json::array({{{"type", "async"}}});
                                   }).dump());
  write_text(c.dir + "/sync.json", with(kBase, [](json& j) {
                                     j["engines"] = json::array({{{"type", "sync"}}});
                                   }).dump());
  if (r.setup) r.setup(c);
  if (::testing::Test::HasFatalFailure()) return;

  std::string script = kPrelude;
  if (const char* kb = std::getenv("ASGD_HARDENING_ULIMIT_KB")) script += "ulimit -v " + std::string(kb) + " || true\n";
  script += "cd " + quote(c.dir) + "\n";
  std::string cmd = r.command;
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{{"{bin}", binary_under_test()},
                                                                                   {"{cfg}", c.cfg},
                                                                                   {"{out}", c.out},
                                                                                   {"{dir}", c.dir},
                                                                                   {"{src}", source_under_test()}})
    cmd = replace_all(cmd, key, value);
  script += cmd + "\n";
  write_text(c.dir + "/row.sh", script);
  double limit = r.timeout;
  if (const char* t = std::getenv("ASGD_HARDENING_TIMEOUT")) limit = std::min(limit, std::atof(t));
  if (ASGD_SANITIZED) limit *= 3;
  limit *= shared_device_slack();
  CommandResult res = run_script(c.dir + "/row.sh", limit);
  c.output = res.output;
  c.exit_code = res.exit_code;
  const std::string shown = res.output.size() > 4000 ? res.output.substr(0, 4000) + "..." : res.output;
  EXPECT_EQ(res.exit_code, r.exit) << "defect " << r.defect << ", command:\n" << cmd << "\noutput:\n" << shown;
  for (const auto& w : r.words)
    EXPECT_NE(res.output.find(w), std::string::npos) << "output lacks '" << w << "':\n" << shown;
  for (const auto& s : r.state) check_state(s, c);
  if (r.check) r.check(c);
}

std::string row_name(const ::testing::TestParamInfo<Row>& info) {
  std::string name = info.param.id;
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Cases, BadInput, ::testing::ValuesIn(rows()), row_name);

// The table is the issue's floor: at least 100 rows, every defect 1..14 with a case, no
// two rows with one name.
TEST(BadInputTable, CoversEveryDefect) {
  std::vector<Row> t = rows();
  EXPECT_GE(t.size(), 100u);
  std::set<int> defects;
  std::set<std::string> ids;
  for (const auto& r : t) {
    defects.insert(r.defect);
    EXPECT_TRUE(ids.insert(r.id).second) << "two rows named " << r.id;
  }
  for (int d = 1; d <= 14; ++d) EXPECT_TRUE(defects.count(d)) << "no row for defect " << d;
  // Issue 31's items 1-9 (6, the MPI ranks, is tests/mpi/test_mpi.py's RanksAgree).
  for (int d = 101; d <= 110; ++d) {
    if (d == 106) continue;
    EXPECT_TRUE(defects.count(d)) << "no row for issue 31, item " << d - 100;
  }
  // Issue 42's C++ items (the Python package's are tests/python/test_bad_input.py's; Medium
  // 9 is tests/mpi's; Low 8, the speed, is scripts/bench_hardening.sh's).
  for (int d : {201, 202, 203, 204, 215, 216, 234, 235, 236, 239})
    EXPECT_TRUE(defects.count(d)) << "no row for issue 42's item " << d;
  size_t cases = 0, controls = 0;
  for (const auto& r : t) (r.is_control ? controls : r.defect > 0 ? cases : controls) += r.is_control || r.defect > 0;
  std::cerr << t.size() << " rows: " << cases << " cases of defects 1-14, " << controls << " controls, "
            << t.size() - cases - controls << " earlier bad-input cases\n";
}

}  // namespace

// ---------------------------------------------------------------- issue #31

namespace {
json zero_step_config() {
  return {{"name", "stuck"},
          {"model", {{"type", "quadratic"}, {"dim", 2}, {"curvature", 1.0}}},
          {"train", {{"lr", 0.01}}},
          {"stop", {{"time", 1.0}}},
          {"cluster", {{"workers", 2}, {"compute", {{"dist", "lognormal"}, {"mean", 0.01}, {"sigma", 1e9}}}}},
          {"engines", json::array({json{{"type", "async"}}})}};
}
}  // namespace

// lognormal sigma 1e9 draws 0 ns steps: virtual time never reached stop.time and the run
// went round at t = 0 forever. It now stops (the no-progress rule, Simulation::run) with
// exit 2 naming cluster.compute; the run is marked failed.
TEST(NoProgress, ZeroNanosecondStepsWithOnlyStopTimeExitTwoNamingClusterCompute) {
  std::string dir = temp_dir("stuck");
  write_text(dir + "/c.json", zero_step_config().dump());
  const auto t0 = std::chrono::steady_clock::now();
  CommandResult r = run_cli("run " + dir + "/c.json --quiet --out " + dir + "/out");
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no progress in virtual time"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cluster.compute"), std::string::npos) << r.output;
  EXPECT_LT(wall, 60.0 * shared_device_slack());
  EXPECT_NE(read_file(dir + "/out/stuck/async-seed1/summary.json").find("\"failed\""), std::string::npos);
}

// The rule is off while another limit can end the run: the same 0 ns steps with
// stop.updates complete at t = 0 (more events at one instant than the rule allows).
TEST(NoProgress, ZeroNanosecondStepsWithAnotherLimitComplete) {
  std::string dir = temp_dir("stuck_ok");
  json c = zero_step_config();
  c["stop"] = {{"time", 1.0}, {"updates", 2 * (asgd::kStuckEventsBase + 2 * asgd::kStuckEventsPerWorker)}};
  c["eval"] = {{"every", 100000}, {"unit", "updates"}};
  write_text(dir + "/c.json", c.dump());
  CommandResult r = run_cli("run " + dir + "/c.json --quiet --out " + dir + "/out");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  json s = summary_at(dir + "/out/stuck/async-seed1");
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["time"].get<double>(), 0.0);
}

// ---------------------------------------------------------------- issue #42

// Medium 6: the Dirichlet draws poll for Ctrl-C. 100 draws of 100,000 workers x 10 classes
// over 1,000,000 samples each leave a worker empty (about 13 s of draws here, then an
// error): with a signal pending, the first class's draw stops the partition at once.
TEST(DirichletPartition, DrawsHearCtrlC) {
  std::vector<int32_t> labels(1000000);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t(i % 10);
  asgd::PartitionSpec spec;
  spec.kind = asgd::PartitionSpec::Kind::Dirichlet;
  spec.alpha = 1;
  asgd::interrupt_count().store(1);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(asgd::partition_samples(labels, 10, 100000, spec, 1), asgd::Interrupted);
  asgd::interrupt_count().store(0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0 * shared_device_slack());
}

// The draws of blocks of classes go side by side through the run's pool: the parts are
// the same whichever order the blocks run in (here: the last block first), and the same
// as drawn one after another.
TEST(DirichletPartition, PartsDoNotDependOnHowTheBlocksRun) {
  std::vector<int32_t> labels(1000000);  // 30,000 workers: blocks of 8 classes
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t((i * 7) % 13);
  asgd::PartitionSpec spec;
  spec.kind = asgd::PartitionSpec::Kind::Dirichlet;
  spec.alpha = 5;
  const auto serial = asgd::partition_samples(labels, 13, 30000, spec, 3);
  size_t ran = 0;
  const auto reversed =
      asgd::partition_samples(labels, 13, 30000, spec, 3, [&](std::vector<std::function<void()>>&& tasks) {
        for (size_t i = tasks.size(); i-- > 0;) tasks[i]();
        ran += tasks.size();
      });
  EXPECT_GT(ran, 1u);  // the blocks did go through the runner
  EXPECT_EQ(serial, reversed);
}

// Low 7: a child this process forks (a model factory calling os.fork) does not keep the
// experiment's lock once this process lets it go: its copy of the descriptor is closed.
TEST(ExperimentLock, AForkedChildDoesNotKeepALock) {
  const std::string dir = temp_dir("forklock");
  const std::string path = dir + "/.lock";
  auto lock = std::make_unique<asgd::FileLock>(path);
  ASSERT_TRUE(lock->try_lock(asgd::FileLock::Mode::Exclusive));
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    // fork() has returned here, so the child's fork handlers have run: say so, then live on
    // as a daemon the factory started, outliving the lock's holder
    const char byte = 1;
    if (::write(ready[1], &byte, 1) != 1) ::_exit(1);
    ::sleep(30);
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);  // the child is past fork()
  ::close(ready[0]);
  ::close(ready[1]);
  lock.reset();  // the holder lets it go (its process would end here)
  asgd::FileLock other(path);
  EXPECT_TRUE(other.try_lock(asgd::FileLock::Mode::Exclusive)) << "the forked child kept the lock";
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}
