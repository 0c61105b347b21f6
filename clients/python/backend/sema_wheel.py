# SPDX-License-Identifier: MIT
"""sema_wheel.py - the build back end (PEP 517, PEP 660) of the sema Python client, with the
standard library alone: a wheel is a zip of the package and three metadata files, so
`pip install ./clients/python` needs neither setuptools nor wheel, nor a download, with any
pip and any Python >= 3.9 (a venv of Debian's python3 or of pyenv's alike)."""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

NAME = "sema_client"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "src", "sema")
TAG = "py3-none-any"
EPOCH = (1980, 1, 1, 0, 0, 0)  # a wheel's bytes do not depend on when it was built


def version():
    with open(os.path.join(PACKAGE, "_version.py"), encoding="utf-8") as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def metadata():
    """The core metadata (METADATA of the wheel, PKG-INFO of the sdist)."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    head = [
        "Metadata-Version: 2.1",
        "Name: sema-client",
        "Version: " + version(),
        "Summary: A client for semad, the sema semaphore server: fleet-wide weighted "
        "semaphores, leases, keyed locks, tickets and events, for threads and asyncio",
        "License: MIT",
        "Requires-Python: >=3.9",
        "Classifier: Programming Language :: Python :: 3",
        "Classifier: Framework :: AsyncIO",
        "Classifier: Typing :: Typed",
        "Description-Content-Type: text/markdown",
    ]
    return "\n".join(head) + "\n\n" + readme


def package_files():
    """(path in the wheel, path on disk) of the package: its modules and py.typed."""
    names = sorted(n for n in os.listdir(PACKAGE) if n.endswith(".py") or n == "py.typed")
    return [("sema/" + n, os.path.join(PACKAGE, n)) for n in names]


def dist_info():
    return "%s-%s.dist-info" % (NAME, version())


def write_wheel(directory, entries):
    """A wheel of `entries` ((name, bytes) pairs) and its metadata; returns its file name."""
    info = dist_info()
    entries = list(entries) + [
        (info + "/METADATA", metadata().encode()),
        (info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: sema_wheel\n"
                           "Root-Is-Purelib: true\nTag: %s\n" % TAG).encode()),
        (info + "/top_level.txt", b"sema\n"),
    ]
    record = []
    for name, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append("%s,sha256=%s,%d" % (name, digest.decode(), len(data)))
    record.append(info + "/RECORD,,")
    entries.append((info + "/RECORD", ("\n".join(record) + "\n").encode()))
    filename = "%s-%s-%s.whl" % (NAME, version(), TAG)
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            member = zipfile.ZipInfo(name, EPOCH)
            member.external_attr = 0o644 << 16
            member.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(member, data)
    return filename


def read(path):
    with open(path, "rb") as f:
        return f.read()


# ---- the PEP 517 hooks ----

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return write_wheel(wheel_directory, [(n, read(p)) for n, p in package_files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose one file puts src/ on sys.path: edits take effect without a rebuild."""
    return write_wheel(wheel_directory, [("sema_client.pth",
                                          (os.path.join(ROOT, "src") + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, version())
    filename = base + ".tar.gz"
    files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")),
             ("README.md", os.path.join(ROOT, "README.md")),
             ("backend/sema_wheel.py", os.path.abspath(__file__))]
    files += [("src/" + n, p) for n, p in package_files()]
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for name, data in [(n, read(p)) for n, p in files] + [("PKG-INFO", metadata().encode())]:
            member = tarfile.TarInfo("%s/%s" % (base, name))
            member.size, member.mode, member.mtime = len(data), 0o644, 315532800
            t.addfile(member, io.BytesIO(data))
    return filename
