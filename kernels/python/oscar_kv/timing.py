"""timing.py: the GPU timing the benchmark scripts share (bench_decode_graph, bench_vs_sdpa, serve_bench,
device/rotation_cost): per-call medians between two CUDA events, CUDA-graph replay medians (launch overhead out), and
the device-to-device copy bandwidth the benchmarks compare against. Needs torch and a CUDA device.

Contract: fn(i) is one call (i counts the calls, so that callers can rotate over inputs); every median is of `reps`
measurements after `warmup` unmeasured calls or replays, in microseconds unless a name says otherwise.
"""
import statistics


def _events_us(run, reps, per=1):
    """Median over `reps` of the time between two events around run(), divided by `per`, in microseconds."""
    import torch
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / per)
    return statistics.median(ts)


def per_call_us(fn, warmup, reps):
    """Median time of one call fn(i) (after `warmup` calls), launch overhead included."""
    import torch
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    n = iter(range(warmup, warmup + reps))
    return _events_us(lambda: fn(next(n)), reps)


def capture(fn, calls, warmup=3):
    """A CUDA graph of `calls` calls fn(0 .. calls-1), captured on a side stream after `warmup` eager calls there
    (allocations and autotuning happen before capture)."""
    import torch
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(warmup):
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for i in range(calls):
            fn(i)
    torch.cuda.synchronize()
    return g


def replay_us(g, reps, per=1, warmup=1):
    """Median time of one replay of graph g divided by `per` (the calls it holds), after `warmup` replays."""
    import torch
    for _ in range(warmup):
        g.replay()
    torch.cuda.synchronize()
    return _events_us(g.replay, reps, per)


def graph_us(fn, calls=20, reps=20, warmup=3):
    """Median time per call of fn as `calls` calls captured in one CUDA graph (launch overhead out)."""
    g = capture(fn, calls, warmup)
    us = replay_us(g, reps, per=calls)
    del g
    return us


def copy_tbps(nbytes=1 << 30):
    """Device-to-device copy bandwidth, read + write, in TB/s (the benchmarks' roofline of the same run)."""
    import torch
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
    b = torch.empty_like(a)
    us = per_call_us(lambda i: b.copy_(a), 3, 20)
    del a, b
    torch.cuda.empty_cache()
    return 2 * nbytes / (us * 1e-6) / 1e12
