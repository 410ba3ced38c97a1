// kernels/buffer.h — DeviceArray<T>: an owning array in the backend's memory (GPU memory
// on CUDA, 64-byte-aligned host memory on OMP/CPP). Plain C++: sim/ and engines/ hold
// these without seeing Thrust or CUDA. Not a container: no element access from the host
// on CUDA; use upload/download.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace asgd {

template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n) { resize_discard(n); }
  ~DeviceArray();
  DeviceArray(DeviceArray&& other) noexcept;
  DeviceArray& operator=(DeviceArray&& other) noexcept;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }

  // Sets the size to n; reallocates (contents lost) only when capacity is short.
  void resize_discard(size_t n);
  void upload(const T* host, size_t n);  // resizes to n
  void upload(const std::vector<T>& host) { upload(host.data(), host.size()); }
  void download(std::vector<T>& host) const;  // host resized to size()
  std::vector<T> to_host() const {
    std::vector<T> h;
    download(h);
    return h;
  }
  void copy_from(const DeviceArray& other);  // resizes
  void fill(T value);

 private:
  T* ptr_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

extern template class DeviceArray<float>;
extern template class DeviceArray<int32_t>;
extern template class DeviceArray<int64_t>;

}  // namespace asgd
