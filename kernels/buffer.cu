// kernels/buffer.cu — DeviceArray storage: cudaMalloc on CUDA, aligned host memory else.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include "kernels/detail/backend.h"

namespace asgd {
namespace {

void* backend_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
#if defined(ASGD_BACKEND_CUDA)
  void* p = nullptr;
  ASGD_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
#else
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  return p;
#endif
}

void backend_free(void* p) {
  if (!p) return;
#if defined(ASGD_BACKEND_CUDA)
  cudaFree(p);
#else
  std::free(p);
#endif
}

// On CUDA a copy is complete, on the device too, when this returns, and a copy from the
// device sees every write queued before it on any stream. A plain cudaMemcpy gives
// neither: it runs on the legacy stream, which the contexts' non-blocking streams do not
// wait for (nor it for them); from pageable memory it returns once the data is staged,
// before the DMA lands; and a device-to-device copy does not wait at all. Kernels on
// another stream then read the old contents (seen on an H100: with --jobs 3 a run's first
// evaluation read its parameters before they had landed). These copies are rare (data and initial
// parameters, engine set-up, the real mode's messages), never per gradient.
enum class Dir { HostToDevice, DeviceToHost, DeviceToDevice };
void backend_copy(void* dst, const void* src, size_t bytes, Dir dir) {
  if (bytes == 0) return;
#if defined(ASGD_BACKEND_CUDA)
  cudaMemcpyKind kind = dir == Dir::HostToDevice   ? cudaMemcpyHostToDevice
                        : dir == Dir::DeviceToHost ? cudaMemcpyDeviceToHost
                                                   : cudaMemcpyDeviceToDevice;
  ASGD_CUDA_CHECK(cudaDeviceSynchronize());  // every kernel that writes or reads src or dst
  ASGD_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
  ASGD_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));  // the copy itself has landed
#else
  (void)dir;
  std::memcpy(dst, src, bytes);
#endif
}

}  // namespace

template <class T>
DeviceArray<T>::~DeviceArray() {
  backend_free(ptr_);
}

template <class T>
DeviceArray<T>::DeviceArray(DeviceArray&& other) noexcept
    : ptr_(other.ptr_), size_(other.size_), capacity_(other.capacity_) {
  other.ptr_ = nullptr;
  other.size_ = other.capacity_ = 0;
}

template <class T>
DeviceArray<T>& DeviceArray<T>::operator=(DeviceArray&& other) noexcept {
  if (this != &other) {
    backend_free(ptr_);
    ptr_ = other.ptr_;
    size_ = other.size_;
    capacity_ = other.capacity_;
    other.ptr_ = nullptr;
    other.size_ = other.capacity_ = 0;
  }
  return *this;
}

template <class T>
void DeviceArray<T>::resize_discard(size_t n) {
  if (n > capacity_) {
    T* fresh = static_cast<T*>(backend_alloc(n * sizeof(T)));
    backend_free(ptr_);
    ptr_ = fresh;
    capacity_ = n;
  }
  size_ = n;
}

template <class T>
void DeviceArray<T>::upload(const T* host, size_t n) {
  resize_discard(n);
  backend_copy(ptr_, host, n * sizeof(T), Dir::HostToDevice);
}

template <class T>
void DeviceArray<T>::download(std::vector<T>& host) const {
  host.resize(size_);
  backend_copy(host.data(), ptr_, size_ * sizeof(T), Dir::DeviceToHost);
}

template <class T>
void DeviceArray<T>::copy_from(const DeviceArray& other) {
  if (&other == this) return;
  resize_discard(other.size_);
  backend_copy(ptr_, other.ptr_, size_ * sizeof(T), Dir::DeviceToDevice);
}

template <class T>
void DeviceArray<T>::fill(T value) {
  if (size_ == 0) return;
#if defined(ASGD_BACKEND_CUDA)
  std::vector<T> host(size_, value);
  backend_copy(ptr_, host.data(), size_ * sizeof(T), Dir::HostToDevice);
#else
  std::fill(ptr_, ptr_ + size_, value);
#endif
}

template class DeviceArray<float>;
template class DeviceArray<int32_t>;
template class DeviceArray<int64_t>;

}  // namespace asgd
