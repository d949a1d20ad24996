#include <ka/extractor/param_buffer.hpp>

#include <algorithm>

namespace ka::extractor {

void* ParamBuffer::allocate_heap(std::size_t bytes, std::size_t align) {
  while (true) {
    if (chunk_ < chunks_.size()) {
      auto& [data, size] = chunks_[chunk_];
      const auto base = reinterpret_cast<std::uintptr_t>(data.get());
      const std::uintptr_t aligned = (base + chunk_used_ + align - 1) & ~(align - 1);
      const std::size_t offset = aligned - base;
      if (offset + bytes <= size) {
        chunk_used_ = offset + bytes;
        total_ += bytes;
        return data.get() + offset;
      }
      ++chunk_;
      chunk_used_ = 0;
      continue;
    }
    const std::size_t size = std::max<std::size_t>(kInlineBytes, bytes + align);
    chunks_.emplace_back(std::make_unique<unsigned char[]>(size), size);
  }
}

}  // namespace ka::extractor
