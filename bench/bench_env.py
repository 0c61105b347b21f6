# SPDX-License-Identifier: MIT
"""bench_env.py - where the Python benches find the build and the test fixtures.

`import bench_env` (from a script in bench/) sets ROOT (the source tree) and BUILD (argv[1], else
$SEMA_BUILD_DIR, else ROOT/build), points $SEMAD and $SEMA_SOURCE_DIR at them for the fixtures,
and puts tests/integration on the import path."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                        os.environ.get("SEMA_BUILD_DIR", os.path.join(ROOT, "build")))
os.environ.setdefault("SEMAD", os.path.join(BUILD, "bin", "semad"))
os.environ.setdefault("SEMA_SOURCE_DIR", ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
