// The worker side of ka-tune's isolated trials (Note [Isolated trials], tuner/src/trial_worker.cpp).
#pragma once

#include <string>

namespace ka::tuner {

/// Call first thing in main() of any program that runs tune() with isolated trials (ka-tune,
/// test programs): in a process started as a trial worker it serves trials over the socket
/// its supervisor passed and then exits; in every other process it returns at once (and
/// records that this program can serve workers, which tune() checks before starting one).
/// Kernels a test registers must be registered before this call, so the worker has them too.
void serve_trial_worker_if_asked();

/// Whether serve_trial_worker_if_asked() has been called in this process.
bool serves_trial_workers() noexcept;

/// Says that this process can run no more trials it could trust (a kernel left its state
/// corrupt, a device context was lost): in a trial worker the trial under way is recorded as
/// 'crashed' with `why`, and the worker is replaced before the next one. A worker on a CUDA
/// device also checks its context after every request (a sticky error is detected without
/// this call). In any other process it only logs `why` as a warning.
void mark_trial_worker_unusable(const std::string& why);

}  // namespace ka::tuner
