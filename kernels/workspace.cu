// kernels/workspace.cu — Workspace: blocks of backend or host memory, handed out in stack
// order (see workspace.h).
#include "kernels/workspace.h"
#include <algorithm>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include "kernels/buffer.h"

namespace asgd {

namespace {
constexpr size_t kAlign = 256;                // every buffer starts on this offset in its block
constexpr size_t kFirstBlockBytes = 1 << 20;  // the smallest block

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

struct HostBlockDeleter {
  void operator()(unsigned char* p) const { std::free(p); }
};
}  // namespace

// Blocks of one kind of memory and the position of the next buffer: block `block`, byte
// `offset`. Blocks are only appended while frames are open, so a buffer never moves.
struct Workspace::Arena {
  explicit Arena(bool host) : host(host) {}
  bool host;
  std::vector<DeviceArray<float>> device_blocks;
  std::vector<std::unique_ptr<unsigned char[], HostBlockDeleter>> host_blocks;
  std::vector<size_t> capacity;  // bytes of each block
  size_t block = 0, offset = 0;

  unsigned char* base(size_t b) {
    return host ? host_blocks[b].get() : reinterpret_cast<unsigned char*>(device_blocks[b].data());
  }
  void add_block(size_t bytes) {
    bytes = round_up(bytes, kAlign);
    if (host) {
      void* p = std::aligned_alloc(kAlign, bytes);
      if (!p) throw std::bad_alloc();
      host_blocks.emplace_back(static_cast<unsigned char*>(p));
    } else {
      device_blocks.emplace_back(bytes / sizeof(float));
    }
    capacity.push_back(bytes);
  }
  size_t total() const {
    size_t t = 0;
    for (size_t c : capacity) t += c;
    return t;
  }
  void* take(size_t bytes) {
    size_t at = round_up(offset, kAlign);
    while (block < capacity.size() && at + bytes > capacity[block]) {  // the next block, or a new one
      ++block;
      at = 0;
    }
    if (block == capacity.size()) add_block(std::max({bytes, kFirstBlockBytes, total()}));
    offset = at + bytes;
    return base(block) + at;
  }
  // With no buffer live: one block of the total size, so that the next job fits in it.
  void merge() {
    if (capacity.size() <= 1) return;
    size_t t = total();
    device_blocks.clear();
    host_blocks.clear();
    capacity.clear();
    add_block(t);
  }
};

Workspace::Workspace() : device_(std::make_unique<Arena>(false)), host_(std::make_unique<Arena>(true)) {}
Workspace::~Workspace() = default;

Workspace::Frame::Frame(Workspace& ws)
    : ws_(ws),
      device_block_(ws.device_->block),
      device_offset_(ws.device_->offset),
      host_block_(ws.host_->block),
      host_offset_(ws.host_->offset),
      entries_(ws.entries_.size()) {
  ++ws.depth_;
}

Workspace::Frame::~Frame() { ws_.close_frame(*this); }

void Workspace::close_frame(const Frame& f) {
  device_->block = f.device_block_;
  device_->offset = f.device_offset_;
  host_->block = f.host_block_;
  host_->offset = f.host_offset_;
  entries_.resize(f.entries_);
  if (--depth_ == 0) {
    device_->merge();
    host_->merge();
  }
}

void* Workspace::take_bytes(const char* name, int index, size_t bytes, bool host) {
  if (depth_ == 0)
    throw std::logic_error(std::string("workspace buffer '") + name + "' taken outside a Workspace::Frame");
  Arena& a = host ? *host_ : *device_;
  void* p = a.take(bytes);
  entries_.push_back(Buffer{name, index, p, bytes, host});
  return p;
}

std::vector<Workspace::Buffer> Workspace::live() const { return entries_; }

size_t Workspace::reserved_bytes() const { return device_->total(); }

}  // namespace asgd
