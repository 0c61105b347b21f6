# SPDX-License-Identifier: MIT
"""test_package.py - the package as users get it: a wheel built with Debian's tools and no
download, installed into a fresh venv and run against a real semad; the type hints under
`mypy --strict` (the package, and the Python examples of docs/client.md as a user's code);
and nothing but the standard library imported at run time."""
import ast
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import SOURCE, start

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.normpath(os.path.join(HERE, ".."))


def sh(*cmd, cwd=None, env=None, timeout=300):
    p = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, "%s failed (%d):\n%s\n%s" % (" ".join(cmd), p.returncode,
                                                           p.stdout[-3000:], p.stderr[-3000:])
    return p.stdout


def clean_env():
    env = dict(os.environ)
    for k in ("PYTHONPATH", "PYTHONHOME", "PIP_INDEX_URL", "PIP_FIND_LINKS"):
        env.pop(k, None)
    env["PIP_NO_INDEX"] = "1"  # nothing may come from a registry
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def build_wheel(tmp):
    """`pip wheel` of a copy of clients/python (the build writes beside its sources)."""
    src = os.path.join(tmp, "src-copy")
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info",
                                                            "build", "dist", "tests"))
    out = os.path.join(tmp, "dist")
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
       "-w", out, src, env=clean_env())
    wheels = glob.glob(os.path.join(out, "sema_client-*.whl"))
    assert len(wheels) == 1, os.listdir(out)
    return wheels[0]


def test_wheel_installs_into_a_fresh_venv(tmp_path):
    wheel = build_wheel(str(tmp_path))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "sema/py.typed" in names and "sema/_flows.py" in names
    assert not [n for n in names if "/tests/" in n or n.startswith("tests/")]
    assert "Requires-Dist" not in meta, "the client needs nothing beyond the standard library"
    assert "Requires-Python: >=3.9" in meta
    venv = str(tmp_path / "venv")
    sh(sys.executable, "-m", "venv", venv, env=clean_env())
    py = os.path.join(venv, "bin", "python")
    sh(py, "-m", "pip", "install", "--no-index", "--no-deps", wheel, env=clean_env())
    program = r'''
import asyncio, sys, sema
assert sema.__file__.startswith(sys.prefix), sema.__file__
c = sema.Client()
sem = c.semaphore("from-the-wheel")
sem.create(2)
with sem.permit(2, timeout=5) as p:
    print("fence", p.fence)
async def main():
    async with sema.AsyncClient() as a:
        async with a.semaphore("from-the-wheel").permit():
            return (await a.semaphore("from-the-wheel").state()).held
print("held", asyncio.run(main()))
c.close()
'''
    with start() as s:
        env = clean_env()
        env["SEMA_SERVER"] = s.url("")
        out = sh(py, "-c", program, cwd=str(tmp_path), env=env)
    assert re.search(r"fence \d+", out) and "held 1" in out, out


def mypy_cmd():
    exe = shutil.which("mypy")
    if exe:
        return [exe]
    if importlib.util.find_spec("mypy") is not None:
        return [sys.executable, "-m", "mypy"]
    pytest.fail("mypy is missing: scripts/deps.sh test installs Debian's mypy")


def doc_examples(tmp):
    """The ```python blocks of docs/client.md, one file each."""
    with open(os.path.join(SOURCE, "docs", "client.md"), encoding="utf-8") as f:
        text = f.read()
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    paths = []
    for i, b in enumerate(blocks):
        p = os.path.join(tmp, "example_%d.py" % i)
        with open(p, "w") as f:
            f.write(b)
        paths.append(p)
    return paths


def test_types_check_with_mypy_strict(tmp_path):
    cache = str(tmp_path / "mypy-cache")
    sh(*mypy_cmd(), "--strict", "--cache-dir", cache, os.path.join(PKG, "src", "sema"),
       cwd=PKG)
    examples = doc_examples(str(tmp_path))
    assert len(examples) >= 3, "docs/client.md has its Python examples"
    env = dict(os.environ, MYPYPATH=os.path.join(PKG, "src"))
    for p in examples:  # each example as a user's own program, typed against the package
        sh(*mypy_cmd(), "--strict", "--cache-dir", cache, p, cwd=str(tmp_path), env=env)


def test_only_the_standard_library_at_run_time():
    stdlib = set(getattr(sys, "stdlib_module_names", ()))
    if not stdlib:
        pytest.skip("sys.stdlib_module_names needs Python >= 3.10")
    outside = []
    for path in glob.glob(os.path.join(PKG, "src", "sema", "*.py")):
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                mods = [node.module or ""]
            else:
                continue
            outside += ["%s: %s" % (os.path.basename(path), m) for m in mods
                        if m.split(".")[0] not in stdlib and m != "__future__"]
    assert not outside, outside


if __name__ == "__main__":
    raise SystemExit(pytest.main([os.path.abspath(__file__)]))
