#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""test_semad_start.py - what semad does with its flags before it serves: a port that is
taken leaves no data store behind."""
import os
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402


def semad(*args, timeout=30):
    return subprocess.run([fx.semad_path()] + list(args), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout * fx.SLOW)


@fx.not_through_proxy("no HTTP request")
def test_a_taken_port_leaves_no_data_store():
    with socket.socket() as taken, tempfile.TemporaryDirectory() as tmp:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        data = os.path.join(tmp, "sema-data")
        for durability in ("strict", "relaxed"):
            p = semad("--listen", "127.0.0.1:%d" % taken.getsockname()[1], "--data", data,
                      "--durability", durability)
            assert p.returncode == 1 and "address already in use" in p.stderr, p
            assert not os.path.exists(data), os.listdir(data)
        # and one that can listen makes it, as before
        with fx.Semad(durability="strict", data=data):
            assert {"sema.db", "LOCK"} <= set(os.listdir(data)), os.listdir(data)


if __name__ == "__main__":
    fx.main(globals())
