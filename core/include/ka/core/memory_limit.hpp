// How much memory one piece of work may ask for: inputs (suite cases, tuned shapes) are
// bounded by it before anything is allocated.
#pragma once

#include <cstdint>
#include <string>

namespace ka {

/// Three quarters of the memory this process can get now: the smaller of /proc/meminfo's
/// MemAvailable and the cgroup's memory.max headroom (the physical memory when neither can be
/// read), so a big machine's memory is usable and work that would only fit by swapping or
/// being OOM-killed is refused.
std::uint64_t memory_limit_bytes();

/// "12.0 GiB (12884901888 bytes)".
std::string format_bytes(std::uint64_t bytes);

}  // namespace ka
