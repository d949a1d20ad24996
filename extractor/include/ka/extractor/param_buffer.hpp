// ParamBuffer: memory a KernelTask owns for its packed arguments (scalars, views, programs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace ka::extractor {

/// A bump arena for packed kernel arguments. Whatever the packer writes here (an
/// ElementwiseArgs with its scalars, a LayerNormArgs with eps) stays valid until the buffer
/// is reset or destroyed, so a task never points at the packing function's stack. The first
/// kInlineBytes need no heap; objects must be trivially destructible.
///
///   ParamBuffer buf;
///   auto* args = buf.emplace<kernels::ElementwiseArgs>();
///   args->program.scalar(alpha);          // lives in buf, not on the stack
class ParamBuffer {
 public:
  static constexpr std::size_t kInlineBytes = 8192;

  ParamBuffer() = default;
  ParamBuffer(const ParamBuffer&) = delete;
  ParamBuffer& operator=(const ParamBuffer&) = delete;

  /// Constructs a T in the buffer; the pointer stays valid until reset().
  template <class T, class... Args>
  T* emplace(Args&&... args) {
    static_assert(std::is_trivially_destructible_v<T>, "ParamBuffer never runs destructors");
    void* p = allocate(sizeof(T), alignof(T));
    return new (p) T(std::forward<Args>(args)...);
  }
  /// Forgets every object (keeps the heap chunks for reuse).
  void reset() noexcept {
    used_ = 0;
    chunk_ = 0;
    chunk_used_ = 0;
  }
  /// Bytes handed out since the last reset (for dumps and tests).
  [[nodiscard]] std::size_t bytes_used() const noexcept { return total_; }
  /// True when `p` points into this buffer's inline storage.
  [[nodiscard]] bool owns_inline(const void* p) const noexcept {
    const auto* b = reinterpret_cast<const unsigned char*>(p);
    return b >= inline_ && b < inline_ + kInlineBytes;
  }

 private:
  void* allocate(std::size_t bytes, std::size_t align) {
    std::size_t offset = (used_ + align - 1) & ~(align - 1);
    if (offset + bytes <= kInlineBytes) {
      used_ = offset + bytes;
      total_ = used_;
      return inline_ + offset;
    }
    return allocate_heap(bytes, align);
  }
  void* allocate_heap(std::size_t bytes, std::size_t align);

  alignas(64) unsigned char inline_[kInlineBytes];
  std::size_t used_ = 0;
  std::size_t total_ = 0;
  std::vector<std::pair<std::unique_ptr<unsigned char[]>, std::size_t>> chunks_;
  std::size_t chunk_ = 0;
  std::size_t chunk_used_ = 0;
};

}  // namespace ka::extractor
