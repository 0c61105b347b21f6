# SPDX-License-Identifier: MIT
"""test_listen.py - semad's --listen takes what servers people use take: a numeric address,
[IPv6], a host name, or no host for every interface; a name that does not resolve is refused
with a message."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402


def bound(spec, *args):
    """Start semad on `spec` and return the address it says it listens on."""
    p = subprocess.Popen([fx.semad_path(), "--durability", "none", "--listen", spec] + list(args),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in p.stderr:
            m = re.search(r"listening on http://(\S+)", line)
            if m:
                return m.group(1)
            if "semad:" in line and "error" not in line and "listening" not in line:
                return line.strip()
        return None
    finally:
        p.kill()
        p.wait(10)


@fx.not_through_proxy("no HTTP request")
def test_host_names_and_empty_host():
    assert bound("localhost:0").startswith(("127.0.0.1:", "[::1]:")), bound("localhost:0")
    assert bound(":0", "--insecure").startswith("0.0.0.0:")  # protected mode: test_auth.py
    assert bound("127.0.0.1:0").startswith("127.0.0.1:")
    p = subprocess.run([fx.semad_path(), "--durability", "none", "--listen",
                        "no-such-host.invalid:0"], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    assert "cannot resolve 'no-such-host.invalid'" in p.stderr, p.stderr


if __name__ == "__main__":
    fx.main(globals())
