"""F.linear through ka's aten override vs stock torch, at the matmul suite's shapes; and the
cost the override adds to a tiny call (a 1-element torch.add).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE PYTHONPATH=build/ci/python \
        /usr/bin/python3 bench/torch_override.py [--threads 2] [--suite suites/matmul.yaml]
        [--rounds 7] [--min-time 0.05] [--settle 0.2] [--cases REGEX]

Each case runs F.linear(x, w[, bias]) (bias for the suite's addmm cases) with ka disabled and
enabled in alternating rounds (drift favours neither side); a round first runs the side's
calls untimed for --settle seconds, then times back-to-back calls for at least --min-time
seconds; the table gives the median per-call time of the rounds, and ka/stock is stock's
median time over ka's. Both sides run on --threads threads (torch.set_num_threads; ka follows
it). Outputs are compared before timing. Unset OPENBLAS_CORETYPE (which this project's
machines set) to compare with OpenBLAS at its best.

Note [Settling between sides]: after a call, OpenBLAS's worker threads spin for about 0.1 s
before they sleep; on a 2-core machine they then take a core from whichever side runs next.
A round that started timing at once measured ka at a third of its speed at 256 x 256. And on
the 2-vCPU guests this was measured on, the first half second of a burst of large GEMMs ran
at half speed on either side (2048^3: 100 ms per call for 6 calls, then 44 ms, both threads
busy throughout). So a side settles for --settle seconds and at least 10 calls.
"""

import argparse
import math
import os
import re
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import yaml

import ka


def cases_of(path, pattern):
    with open(path) as f:
        suite = yaml.safe_load(f)
    for group in suite["groups"]:
        for c in group["cases"]:
            if c.get("op") in ("aten::mm", "aten::addmm") and re.search(pattern, c["name"]):
                yield c["name"], c["op"] == "aten::addmm", c["M"], c["K"], c["N"]


def per_call_seconds(fn, min_time):
    fn()
    calls, elapsed = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return elapsed / calls
        calls = max(calls * 2, int(calls * min_time / max(elapsed, 1e-9)) + 1)


def settle(fn, seconds, min_calls=10):
    end = time.perf_counter() + seconds
    calls = 0
    while calls < min_calls or time.perf_counter() < end:
        fn()
        calls += 1


def interleaved(fn, rounds, min_time, settle_time):
    """Median per-call seconds of fn with ka disabled and enabled, in alternating rounds."""
    stock, on_ka = [], []
    for r in range(rounds):
        for side in ((False, True) if r % 2 == 0 else (True, False)):
            with ka.enabled(side):
                settle(fn, settle_time)
                (on_ka if side else stock).append(per_call_seconds(fn, min_time))
    return statistics.median(stock), statistics.median(on_ka)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--suite", default="suites/matmul.yaml")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--min-time", type=float, default=0.05)
    p.add_argument("--settle", type=float, default=0.2,
                   help="untimed seconds (and at least 10 calls) of a side before its round")
    p.add_argument("--cases", default=".", help="regular expression on case names")
    opts = p.parse_args()
    torch.set_num_threads(opts.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s) for stock and ka; "
          f"ka library {ka.library_path()}")
    blas = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}
    print(f"OpenBLAS environment: {blas or 'unset (OpenBLAS picks its kernels for this CPU)'}")
    print(f"time = median over {opts.rounds} alternating rounds of the mean per-call time "
          f"(>= {opts.min_time} s of back-to-back calls per round after {opts.settle} s and "
          f">= 10 calls untimed, hot cache)")
    print(f"{'case':30} {'M':>5} {'K':>6} {'N':>6} | {'stock ms':>9} {'ka ms':>9} | {'ka/stock':>8}")
    ratios = []
    for name, bias, m, k, n in cases_of(opts.suite, opts.cases):
        x, w = torch.randn(m, k), torch.randn(n, k)
        b = torch.randn(n) if bias else None
        ref = F.linear(x, w, b)
        with ka.enabled():
            got = F.linear(x, w, b)
        tol = 2e-5 * math.sqrt(k)
        torch.testing.assert_close(got, ref, rtol=tol, atol=tol * ref.abs().max().item())
        stock, on_ka = interleaved(lambda: F.linear(x, w, b), opts.rounds, opts.min_time,
                                   opts.settle)
        ratios.append(stock / on_ka)
        print(f"{name:30} {m:5} {k:6} {n:6} | {stock * 1e3:9.3f} {on_ka * 1e3:9.3f} | "
              f"{ratios[-1]:7.2f}x", flush=True)
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"F.linear ka/stock: geometric mean {geo:.2f}x over {len(ratios)} cases, "
              f"lowest {min(ratios):.2f}x")

    a, c = torch.randn(1), torch.randn(1)
    stock, on_ka = interleaved(lambda: torch.add(a, c), opts.rounds, opts.min_time, opts.settle)
    print(f"1-element torch.add: stock {stock * 1e6:.2f} us, ka enabled {on_ka * 1e6:.2f} us per "
          f"call: enabled/stock cost {on_ka / stock:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
