// A persistent pool of worker threads for the CPU kernels (framework-neutral). Created on first use
// with SPECWORKER_LINEAR_THREADS threads in all (the caller counts as one; default: the CPUs this
// process may use, at most 8). Workers spin briefly after a job, then sleep on a condition variable.
#pragma once
#include <stdint.h>

#include <string>

namespace specworker {

using UnitFn = void (*)(const void* ctx, int64_t unit);

// Runs fn(ctx, u) for every u in [0, num_units) on up to min(max_threads, pool size, num_units)
// threads, the caller included, and returns when all units are done. Units are handed out one at a
// time from a shared counter, so which thread runs a unit varies; fn must make a unit's result
// independent of that (the linear kernel does: a unit owns its outputs and their whole k loop).
// Calls from several threads at once are safe: a call that finds the pool busy runs on its caller.
// fn must not throw.
void ParallelFor(int64_t num_units, UnitFn fn, const void* ctx, int max_threads);

// Threads in the pool (>= 1), or -1 with *error set when SPECWORKER_LINEAR_THREADS is unusable.
int PoolThreads(std::string* error);

// The threads ParallelFor shares units among for max_threads (<= 0: no cap), before its cap by the unit count.
int ParallelThreads(int max_threads);

}  // namespace specworker
