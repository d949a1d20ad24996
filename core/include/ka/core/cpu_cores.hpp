// How many CPU cores this process may use: the thread counts ka plans and tunes for.
#pragma once

namespace ka {

/// The logical cores in this process's CPU affinity mask, as the process began (what taskset,
/// a container's cpuset or a Slurm task's core binding grant), at least 1; the online cores
/// when the mask cannot be read. Read once: ka's thread pool, thread candidates and the CPU
/// fingerprint all use this count, so a process tunes and runs for the cores it was given,
/// not for the whole machine. See Note [Usable cores] in cpu_cores.cpp.
int usable_cores();

}  // namespace ka
