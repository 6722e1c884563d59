"""Shared GPU timing helpers for the standalone-kernel benchmarks (CuPy + ctypes, no Paddle; the benchmarks
timed against a PyTorch baseline use torch_event_runs).

Launchers (kernel_harness.raw_launcher) must read the stream with ``stream_ptr(cp)`` at every call: ``time_graph`` captures on
its own stream, and a launch on any other stream would escape the capture.
"""

from __future__ import annotations

import ctypes
import statistics


def stream_ptr(cp) -> ctypes.c_void_p:
    """The current CuPy stream, read at call time so graph capture records the launch."""
    return ctypes.c_void_p(cp.cuda.get_current_stream().ptr)


def time_events(cp, fn, iters: int, warmup: int = 20) -> float:
    """Microseconds per call of back-to-back calls, timed with CUDA events."""
    for _ in range(warmup):
        fn()
    cp.cuda.get_current_stream().synchronize()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) * 1e3 / iters


def time_graph(cp, fn, iters: int, per_graph: int = 20) -> float:
    """Microseconds per call from replays of a graph holding per_graph calls."""
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        fn()
        stream.synchronize()
        stream.begin_capture()
        for _ in range(per_graph):
            fn()
        graph = stream.end_capture()
        if graph is None:
            raise RuntimeError("stream capture produced no graph")
        for _ in range(3):
            graph.launch(stream)
        stream.synchronize()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        reps = max(1, iters // per_graph)
        for _ in range(reps):
            graph.launch(stream)
        stop.record(stream)
        stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) * 1e3 / (reps * per_graph)


def torch_event_runs(torch, fn, iters: int, warmup: int, runs: int, reset=None) -> list[float]:
    """Microseconds per call of `iters` back-to-back calls timed with CUDA events, once per run, each run
    after `warmup` calls. `reset` (for ops that update their inputs in place) runs before the warmup and
    again before the timed calls."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_run = []
    for _ in range(runs):
        if reset is not None:
            reset()
        for _ in range(warmup):
            fn()
        if reset is not None:
            reset()
        torch.cuda.synchronize()
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        per_run.append(start.elapsed_time(end) * 1e3 / iters)
    return per_run


def time_median_us(cp, fn, reps: int, calls: int) -> float:
    """Median over reps of the mean time of `calls` back-to-back calls, in microseconds (after warm-up)."""
    for _ in range(3):
        fn()
    cp.cuda.get_current_stream().synchronize()
    samples = []
    for _ in range(reps):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, stop) * 1e3 / calls)
    return statistics.median(samples)
