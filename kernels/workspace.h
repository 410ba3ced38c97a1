// kernels/workspace.h — Workspace: the memory a job's kernels work in, handed out as named,
// typed buffers of a stated size inside nested frames. A buffer is live from take() until
// the frame it was taken in closes, and every live buffer is disjoint from every other:
// the simulation's 16-bit copy of the parameters, a batch's requests and each layer of a
// model take their own, so none can overwrite another however many there are. Frames
// close in stack order (RAII), so a job's buffers go back when it ends.
// A warm job allocates nothing: memory comes from blocks that are kept. When a job needs
// more than the blocks hold, a new block is added (earlier buffers never move); when the
// outermost frame closes, the blocks are merged into one block of their total size.
// One per ExecContext; not thread-safe. Not here: what the buffers hold (each user's own).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

namespace asgd {

class Workspace {
 public:
  Workspace();
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // Buffers taken while a Frame is open are released when it is destroyed.
  class Frame {
   public:
    explicit Frame(Workspace& ws);
    ~Frame();
    Frame(const Frame&) = delete;
    Frame& operator=(const Frame&) = delete;

   private:
    friend class Workspace;
    Workspace& ws_;
    size_t device_block_, device_offset_, host_block_, host_offset_, entries_;
  };

  // `count` values of T in backend memory (GPU memory on CUDA), aligned to 256 bytes
  // (CUDA) or 64 (CPU), contents
  // undefined. `name` (a string that outlives the workspace, e.g. a literal) and `index`
  // (a layer's or a request's number, -1 for none) say whose it is. Throws
  // std::logic_error when no frame is open.
  template <class T>
  T* take(const char* name, size_t count, int index = -1) {
    static_assert(std::is_trivially_copyable<T>::value, "workspace buffers hold plain values");
    return static_cast<T*>(take_bytes(name, index, count * sizeof(T), /*host=*/false));
  }
  // The same in host memory, each value constructed as T() (zero for numbers): per-call
  // tables and state. T is never destroyed, so it must not need to be.
  template <class T>
  T* take_host(const char* name, size_t count, int index = -1) {
    static_assert(std::is_trivially_copyable<T>::value && std::is_trivially_destructible<T>::value,
                  "workspace buffers hold plain values");
    T* p = static_cast<T*>(take_bytes(name, index, count * sizeof(T), /*host=*/true));
    for (size_t i = 0; i < count; ++i) new (p + i) T();
    return p;
  }

  // A live buffer, for tests and diagnostics.
  struct Buffer {
    const char* name;
    int index;
    const void* data;
    size_t bytes;
    bool host;
  };
  // Every live buffer, in the order taken.
  std::vector<Buffer> live() const;
  // Backend memory the blocks hold now (bytes): it grows to the largest job seen.
  size_t reserved_bytes() const;
  // Open frames.
  size_t depth() const { return depth_; }

  struct Arena;  // blocks of one kind of memory (workspace.cu)

 private:
  void* take_bytes(const char* name, int index, size_t bytes, bool host);
  void close_frame(const Frame& f);

  std::unique_ptr<Arena> device_, host_;
  std::vector<Buffer> entries_;
  size_t depth_ = 0;
};

}  // namespace asgd
