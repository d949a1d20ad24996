"""python3 -m ka [OPTIONS] PROGRAM.py [ARGS...]
   python3 -m ka [OPTIONS] -m MODULE [ARGS...]

Runs an unmodified PyTorch program with ka enabled (as python3 -m cProfile runs one under the
profiler) and prints on exit, to stderr, which operators and shapes ran on ka's kernels and
which fell back to libtorch's. --table also says which configurations came from the tuned
table (KA_TUNED_TABLE, or --load-table PATH)."""

import argparse
import runpy
import sys

import ka


def parse(argv):
    usage, description = __doc__.split("\n\n", 1)
    p = argparse.ArgumentParser(
        prog="python3 -m ka", usage=usage.replace("python3 -m ka", "%(prog)s"),
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--table", action="store_true",
                   help="show each configuration and whether it came from the tuned table")
    p.add_argument("--load-table", metavar="PATH",
                   help="load the tuned table at PATH (as KA_TUNED_TABLE does)")
    p.add_argument("--quiet", action="store_true", help="no report on exit")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python3 -m")
    p.add_argument("program", nargs="?", metavar="PROGRAM.py", help="the program to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    opts = p.parse_args(argv)
    if opts.module is None and opts.program is None:
        p.error("give a PROGRAM.py or -m MODULE")
    if opts.module is not None and opts.program is not None:
        opts.args = [opts.program] + opts.args
    return opts


def main(argv=None):
    opts = parse(sys.argv[1:] if argv is None else argv)
    if opts.load_table:
        ka.load_table(opts.load_table)
    target = opts.module or opts.program
    sys.argv = [target] + opts.args
    ka.enable()
    code = 0
    try:
        if opts.module:
            runpy.run_module(opts.module, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, __import__("os").path.dirname(opts.program) or ".")
            runpy.run_path(opts.program, run_name="__main__")
    except SystemExit as e:
        code = e.code
    finally:
        ka.disable()
        if not opts.quiet:
            print(ka.format_report(table=opts.table), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
