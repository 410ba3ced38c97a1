// sim/base/state_archive.h — one description of a piece of state that both writes it to a
// checkpoint and reads it back (docs/reliability.md, "Checkpoints"): each stateful class
// has one checkpoint(StateArchive&) that hands every member to io(), and the archive
// either appends the member's bytes or overwrites the member from them, so the two
// directions cannot drift apart. Values are stored as their bytes (the same build reads
// what it wrote: the file's header says which build). A section tag before each part
// makes a reader that meets another part (a layout that changed) fail with a message
// instead of reading garbage.
#pragma once
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>
#include "kernels/buffer.h"

namespace asgd {

// A checkpoint that cannot be read back (truncated, another layout).
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class StateArchive {
 public:
  // Saving: appends to *out.
  explicit StateArchive(std::string* out) : out_(out) {}
  // Loading from `in` (which must outlive the archive); `source` names it in errors.
  StateArchive(const std::string& in, std::string source) : in_(&in), source_(std::move(source)) {}
  bool saving() const { return out_ != nullptr; }
  bool done() const { return in_ && pos_ == in_->size(); }

  template <class T>
  std::enable_if_t<std::is_trivially_copyable<T>::value> io(T& v) {
    bytes(&v, sizeof(T));
  }
  void io(std::string& s) {
    uint64_t n = s.size();
    io(n);
    if (!saving()) s.resize(size_t(check_size(n, 1)));
    bytes(&s[0], size_t(n));
  }
  void io(std::vector<bool>& v) {
    uint64_t n = v.size();
    io(n);
    if (!saving()) v.assign(size_t(check_size(n, 1)), false);
    for (size_t i = 0; i < v.size(); ++i) {
      bool b = v[i];
      io(b);
      v[i] = b;
    }
  }
  template <class T>
  void io(std::vector<T>& v) {
    uint64_t n = v.size();
    io(n);
    if (!saving()) v.resize(size_t(check_size(n, std::is_trivially_copyable<T>::value ? sizeof(T) : 1)));
    if constexpr (std::is_trivially_copyable<T>::value)
      bytes_of(v);
    else
      for (auto& x : v) io(x);
  }
  template <class T>
  void io(std::deque<T>& v) {
    uint64_t n = v.size();
    io(n);
    if (!saving()) v.resize(size_t(check_size(n, 1)));
    for (auto& x : v) io(x);
  }
  template <class K, class V>
  void io(std::map<K, V>& m) {
    uint64_t n = m.size();
    io(n);
    if (saving()) {
      for (auto& kv : m) {
        K k = kv.first;
        io(k);
        io(kv.second);
      }
      return;
    }
    m.clear();
    const uint64_t count = check_size(n, 1);
    for (uint64_t i = 0; i < count; ++i) {
      K k{};
      io(k);
      io(m[k]);
    }
  }
  // A backend array: its values go through the host.
  void io(DeviceArray<float>& a) {
    std::vector<float> h;
    if (saving()) a.download(h);
    io(h);
    if (!saving()) a.upload(h);
  }
  // A section's name: written, or checked when read.
  void tag(const char* name) {
    std::string s = name;
    io(s);
    if (!saving() && s != name)
      throw CheckpointError(source_ + ": expected the part \"" + std::string(name) + "\", found \"" + s +
                            "\" (written by another layout)");
  }
  // Reading: a value read does not hold what it must (a count that does not match).
  [[noreturn]] void fail(const std::string& what) const { throw CheckpointError(source_ + ": " + what); }

 private:
  template <class T>
  void bytes_of(std::vector<T>& v) {
    if (!v.empty()) bytes(v.data(), v.size() * sizeof(T));
  }
  void bytes(void* p, size_t n) {
    if (saving()) {
      out_->append(static_cast<const char*>(p), n);
      return;
    }
    if (n > in_->size() - pos_)
      throw CheckpointError(source_ + ": truncated (" + std::to_string(in_->size()) + " bytes)");
    if (n) std::memcpy(p, in_->data() + pos_, n);
    pos_ += n;
  }
  // A count read: at most what the bytes left could hold.
  uint64_t check_size(uint64_t n, size_t each) const {
    if (n > (in_->size() - pos_) / std::max<size_t>(each, 1))
      throw CheckpointError(source_ + ": truncated (a count of " + std::to_string(n) + " where " +
                            std::to_string(in_->size() - pos_) + " bytes are left)");
    return n;
  }

  std::string* out_ = nullptr;
  const std::string* in_ = nullptr;
  size_t pos_ = 0;
  std::string source_;
};

}  // namespace asgd
