"""python3 -m ka PROGRAM.py: an unmodified program runs with ka enabled and the report on exit
lists what ran on ka's kernels; KA_OVERRIDE_ATEN=1 enables ka when the library loads."""

import os
import subprocess
import sys
import textwrap

import ka

PROGRAM = textwrap.dedent("""
    import sys
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 10), nn.Softmax(dim=-1))
    x = torch.randn(32, 64)
    y = model(x)
    print("rows", y.shape[0], "sum", round(float(y.sum()), 3))
    z = model(x.double().to(torch.float32)).double()
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
""")


def run(args, env=None, **kw):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable] + args, capture_output=True, text=True, env=e,
                          timeout=300, **kw)


def test_python_m_ka_runs_a_program_and_reports(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    stock = run([str(prog)])
    r = run(["-m", "ka", "--table", str(prog), "3"])
    assert r.returncode == 3, r.stderr
    assert r.stdout == stock.stdout  # same printed results
    assert "rows 32 sum 32.0" in r.stdout
    assert "aten::addmm" in r.stderr and "gemm_f32" in r.stderr
    assert "(heuristic)" in r.stderr  # --table: where each configuration came from
    assert "ran on ka's kernels" in r.stderr


def test_python_m_ka_help_and_usage_errors():
    r = run(["-m", "ka", "--help"])
    assert r.returncode == 0 and "PROGRAM.py" in r.stdout
    r = run(["-m", "ka"])
    assert r.returncode == 2 and "give a PROGRAM.py" in r.stderr


def test_override_at_load_for_unmodified_programs(tmp_path):
    code = ("import torch, ka; x = torch.randn(8, 8); torch.mm(x, x); "
            "print(ka.is_enabled(), ka.explain()[-1]['served'])")
    r = run(["-c", code], env={"KA_OVERRIDE_ATEN": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "ka"]


def test_preloaded_library_serves_a_program_that_never_imports_ka():
    code = ("import torch; x = torch.randn(8, 8); torch.mm(x, x); "
            "print([l for l in torch._C._dispatch_dump('aten::mm').splitlines() "
            "if l.startswith('CPU:')])")
    r = run(["-c", code], env={"KA_OVERRIDE_ATEN": "1", "LD_PRELOAD": ka.library_path()})
    assert r.returncode == 0, r.stderr
    assert "pytorch/src/library.cpp" in r.stdout  # the CPU kernel registered by ka


def test_bad_tuned_table_at_load_names_the_file(tmp_path):
    for code in ("import torch, ka; ka.enable()",  # the override
                 "import torch, ka; ka.ops.mm(torch.ones(2, 2), torch.ones(2, 2))"):  # ka.ops
        r = run(["-c", code], env={"KA_TUNED_TABLE": str(tmp_path / "missing.db")})
        assert r.returncode != 0, code
        assert "missing.db" in r.stderr, code
