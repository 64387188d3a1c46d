// How much memory this process may still take, for capacity checks made before allocating.
#pragma once

#include <cstddef>
#include <string>

namespace gemma {

// Bytes available to this process: MemAvailable of /proc/meminfo, lowered to what the cgroup v2
// limit (memory.max - memory.current) leaves when the process runs in a limited cgroup. 0 when
// neither can be read (then callers skip their check).
size_t AvailableMemoryBytes();

// "1.5 GiB", "512.0 MiB": for messages.
std::string FormatBytes(double bytes);

}  // namespace gemma
