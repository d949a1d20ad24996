"""ka's tuned kernels inside PyTorch's own dispatcher.

    import ka
    ka.enable()                  # aten's fp32 CPU kernels -> ka's, where ka serves the call
    y = torch.nn.functional.linear(x, w)
    print(ka.explain()[-1])      # kernel, version, config and provenance of that call
    ka.disable()                 # libtorch's kernels, exactly as before

    with ka.enabled():           # the same, for a block
        ...

Loading the package loads libka_torch.so (torch.ops.load_library), which also defines
torch.ops.ka.<op> with aten's schemas (ka.ops.mm(a, b), ...). What ka does not serve (another
dtype or device, a layout or shape its kernels decline) runs on libtorch's own kernel.
Configurations come from the tuned table named by KA_TUNED_TABLE, or ka.load_table(path).
`python3 -m ka PROGRAM.py [ARGS]` runs an unmodified program with ka enabled and reports which
operators ran on ka's kernels; with KA_OVERRIDE_ATEN=1 the library enables ka when it loads.
"""

import contextlib
import json
import os

import torch

__all__ = [
    "enable", "disable", "is_enabled", "enabled", "load_table", "explain", "report",
    "format_report", "reset", "library_path", "ops",
]


def library_path():
    """The libka_torch.so this package loads: $KA_LIBRARY, else the one it was built or
    installed with."""
    path = os.environ.get("KA_LIBRARY")
    if path:
        return path
    from . import _library
    return _library.path


def _load():
    path = library_path()
    if not os.path.isfile(path):
        raise ImportError(
            f"ka: libka_torch.so not found at {path} (build it with `cmake --build --preset ci "
            f"--target ka_pytorch`, or set KA_LIBRARY)")
    torch.ops.load_library(path)
    return torch.ops.ka


ops = _load()


def enable():
    """Runs aten's fp32 CPU operators that ka serves on ka's kernels (idempotent)."""
    ops._enable()


def disable():
    """Restores libtorch's own kernels (idempotent)."""
    ops._disable()


def is_enabled():
    """Whether ka's kernels are in front of aten's."""
    return bool(ops._enabled())


@contextlib.contextmanager
def enabled(on=True):
    """Enables ka (or, with on=False, disables it) for a block, then restores the state."""
    before = is_enabled()
    (enable if on else disable)()
    try:
        yield
    finally:
        (enable if before else disable)()


def load_table(path):
    """Loads the configurations tuned on this machine from a ka database or exported table;
    returns how many this CPU now has."""
    return int(ops._load_table(os.fspath(path)))


def explain():
    """The last calls (up to 64, oldest first) as dicts: op, shapes, dtypes, served ("ka" or
    "fallback"), and kernel, kernel_version, config, provenance, shape_key, or reason."""
    return json.loads(ops._explain())


def report():
    """Every (op, shapes, dtypes) seen since load or reset(), as dicts with ka_calls,
    fallback_calls, and the kernel and config of the first call on ka or the first reason
    for a fallback."""
    return json.loads(ops._report())


def reset():
    """Forgets what explain() and report() would show."""
    ops._reset()


def _shapes_text(shapes):
    return " ".join("x".join(str(s) for s in shape) if shape else "scalar" for shape in shapes)


def format_report(rows=None, table=False):
    """report() as a table: operator, shapes, calls on ka and on libtorch, and what ran (with
    table=True, whether the configuration came from the tuned table)."""
    rows = report() if rows is None else rows
    if not rows:
        return "ka: no operator ka serves was called"
    head = ["operator", "shapes", "dtype", "on ka", "fallback", "ran"]
    lines = []
    for r in rows:
        if r.get("kernel"):
            ran = f"{r['kernel']} v{r['kernel_version']}"
            if table:
                ran += f" [{r['config']}] ({r['provenance']})"
        else:
            ran = f"libtorch: {r.get('reason', '')}"
        dtypes = sorted(set(r["dtypes"]))
        lines.append([r["op"], _shapes_text(r["shapes"]), ",".join(dtypes),
                      str(r["ka_calls"]), str(r["fallback_calls"]), ran])
    widths = [max(len(head[i]), *(len(l[i]) for l in lines)) for i in range(len(head) - 1)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)) + "  " + cells[-1]
    ka_calls = sum(r["ka_calls"] for r in rows)
    fallback = sum(r["fallback_calls"] for r in rows)
    total = ka_calls + fallback
    summary = (f"ka: {ka_calls} of {total} calls of the operators ka serves ran on ka's kernels "
               f"({100.0 * ka_calls / total:.1f}%), {fallback} on libtorch's")
    return "\n".join([summary, fmt(head)] + [fmt(l) for l in lines])

