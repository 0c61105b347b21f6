# SPDX-License-Identifier: MIT
"""test_package.py - the package as users get it: the README's install commands run as
written in a fresh venv of each python3 here (Debian's, pyenv's), offline, with and without
setuptools and wheel, and the installed client run against a real semad; the wheel's
contents; the type hints under
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


def readme_install_block():
    """The commands of the README's Install section, as a user types them."""
    with open(os.path.join(PKG, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## Install"):]
    return re.search(r"^```sh\n(.*?)^```", section, re.S | re.M).group(1)


def interpreters():
    """Each distinct python3 a user may have: Debian's, and the one first on PATH (pyenv's,
    say), by the real file each runs."""
    found = {}
    for py in ("/usr/bin/python3", shutil.which("python3"), sys.executable):
        if py and os.path.exists(py):
            real = subprocess.run([py, "-c", "import sys; print(sys.executable)"],
                                  capture_output=True, text=True).stdout.strip()
            found.setdefault(os.path.realpath(real or py), py)
    return sorted(found.values())


def run_install_block(tmp, python3, venv_args=()):
    """The README's install commands in a directory laid out as the source tree, with
    `python3` being `python3` (and `python3 -m venv` given `venv_args`); returns the
    venv's interpreter."""
    os.makedirs(tmp)
    os.makedirs(os.path.join(tmp, "clients"))
    os.symlink(PKG, os.path.join(tmp, "clients", "python"))
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir)
    with open(os.path.join(bindir, "python3"), "w") as f:
        f.write('#!/bin/sh\nif [ "$1 $2" = "-m venv" ]; then shift 2; exec %s -m venv %s "$@"; fi\n'
                'exec %s "$@"\n' % (python3, " ".join(venv_args), python3))
    os.chmod(os.path.join(bindir, "python3"), 0o755)
    env = clean_env()
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    out = sh("bash", "-e", "-c", readme_install_block(), cwd=tmp, env=env)
    assert out.strip().splitlines()[-1] == sema_version(), out
    assert not os.path.exists(os.path.join(PKG, "build")), "the build wrote into the sources"
    assert not glob.glob(os.path.join(PKG, "src", "*.egg-info")), "the build wrote into src/"
    return os.path.join(tmp, ".venv", "bin", "python")


def sema_version():
    with open(os.path.join(PKG, "src", "sema", "_version.py")) as f:
        return re.search(r'^__version__ = "(.+)"', f.read(), re.M).group(1)


def has_module(py, name):
    return subprocess.run([py, "-c", "import " + name], capture_output=True).returncode == 0


USE = r'''
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
sem.delete()
c.close()
'''


@pytest.mark.parametrize("python3", interpreters())
def test_the_readme_install_works_in_a_fresh_venv(tmp_path, python3):
    """As written, in a venv of this python3 (Debian's has pip and setuptools, no wheel;
    Python >= 3.12 has pip alone), with no download: then the client runs."""
    py = run_install_block(str(tmp_path / "tree"), python3)
    with start() as s:
        env = clean_env()
        env["SEMA_SERVER"] = s.url("")
        out = sh(py, "-c", USE, cwd=str(tmp_path), env=env)
    assert re.search(r"fence \d+", out) and "held 1" in out, out


def test_the_readme_install_works_where_wheel_is_installed(tmp_path):
    """The same in a venv that sees Debian's setuptools and wheel (--system-site-packages):
    the package's own back end builds it, whatever the venv has."""
    if not has_module("/usr/bin/python3", "wheel"):
        pytest.skip("Debian's python3-wheel is not installed (scripts/deps.sh test installs it)")
    py = run_install_block(str(tmp_path / "tree"), "/usr/bin/python3", ["--system-site-packages"])
    assert has_module(py, "wheel") and has_module(py, "setuptools")
    assert sh(py, "-c", "import sema; print(sema.__file__)").startswith(str(tmp_path))


def test_the_wheel_holds_the_package_and_its_metadata(tmp_path):
    out = str(tmp_path / "dist")
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", out, PKG, env=clean_env())
    wheels = glob.glob(os.path.join(out, "sema_client-*.whl"))
    assert len(wheels) == 1, os.listdir(out)
    with zipfile.ZipFile(wheels[0]) as z:
        assert z.testzip() is None
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "sema/py.typed" in names and "sema/_flows.py" in names
    assert not [n for n in names if "/tests/" in n or n.startswith("tests/")]
    assert not [n for n in names if n.startswith("backend/")]
    assert "Requires-Dist" not in meta, "the client needs nothing beyond the standard library"
    assert "Requires-Python: >=3.9" in meta
    assert "Version: %s\n" % sema_version() in meta


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
