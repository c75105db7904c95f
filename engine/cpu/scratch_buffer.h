// Packing scratch for the GEMMs: 64-byte aligned, kept between calls so a training step does not
// allocate (each user keeps one per thread, thread_local); it only grows.
#pragma once

#include <cstddef>
#include <new>

namespace qkv::cpu {

class ScratchBuffer {
 public:
  ~ScratchBuffer() { release(); }
  void* get(size_t bytes) {
    if (bytes > bytes_) {
      release();
      data_ = ::operator new(bytes, std::align_val_t(64));
      bytes_ = bytes;
    }
    return data_;
  }

 private:
  void release() {
    if (data_) ::operator delete(data_, std::align_val_t(64));
    data_ = nullptr;
    bytes_ = 0;
  }
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace qkv::cpu
