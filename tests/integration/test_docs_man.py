# SPDX-License-Identifier: MIT
"""test_docs_man.py - the EXAMPLES of the man pages (docs/man/*.1) run, as the examples of
the other docs do (test_docs.py), and the defaults semad.1 gives are those of `semad --help`.

A page's EXAMPLES (its .nf blocks, as `man` prints them) run in order in one bash session
(`set -e -o pipefail`), in a scratch directory, with the build's `sema` and `semad` first on
PATH and $SEMA_SERVER a semad of the test's own. What a reader would put in place is put in
place, and nothing else: a path of the system (/etc/sema/tokens, /var/lib/sema) is one in
the scratch directory; a host name (sema.example, sema.internal) is loopback and a fixed port
is a free one; the TLS files (ca.pem, server.pem, server.key) are made by the test; the
command a `--` runs (make, ./deploy.sh) and a bare `make` are `true`; a shared-memory
semaphore gets a name of the test's own. A `semad` line starts semad in the background and
waits until it listens (one that exits fails the test), once the semad of an earlier line
has stopped (the examples show one server, started one way, then another); a `sema watch` runs in the
background until the session ends; curl fails on an HTTP error (-f). Each page's session
must exit 0."""
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402
from test_tls import Certs  # noqa: E402


def man_page(name):
    with open(os.path.join(fx.source_dir(), "docs", "man", name), encoding="utf-8") as f:
        return f.read()


def roff_text(line):
    """A line of a .nf block as `man` shows it."""
    line = re.sub(r"\\f[BIRP]", "", line)
    for a, b in (("\\-", "-"), ("\\(aq", "'"), ("\\(dq", '"'), ("\\e", "\\"), ("\\\\", "\\")):
        line = line.replace(a, b)
    return line


def examples(name):
    """The lines of the EXAMPLES section's .nf blocks, joined at continuation backslashes."""
    text = man_page(name)
    section = text[text.index(".SH EXAMPLES"):]
    section = section[:section.find("\n.SH ", 1)] if "\n.SH " in section[1:] else section
    lines, inside = [], False
    for ln in section.split("\n"):
        if ln.startswith(".nf"):
            inside = True
        elif ln.startswith(".fi"):
            inside = False
        elif inside:
            lines.append(roff_text(ln))
    joined = []
    for ln in lines:
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1] + " " + ln.strip()
        else:
            joined.append(ln)
    return joined


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Session:
    """The rewriting of example lines into a script (the module's docstring says what)."""

    def __init__(self, tmp, lines, server_port):
        # a page that starts no semad talks to the test's: its fixed port is that one
        self.ports = {} if any(ln.startswith("semad ") for ln in lines) else {"7070": server_port}
        self.tmp = tmp
        self.shm = "man-%d" % os.getpid()

    def port(self, p):
        return self.ports.setdefault(p, free_port())

    def line(self, ln):
        code = ln.split(" #")[0].rstrip() if not ln.lstrip().startswith("#") else ""
        if not code.strip():
            return None
        code = code.replace("/etc/sema/tokens", "tokens").replace("/var/lib/sema", "data")
        code = re.sub(r"\b(sema\.example|sema\.internal)\b", "localhost", code)
        code = re.sub(r"(?<=:)(7070|7443)\b", lambda m: str(self.port(m.group(1))), code)
        code = re.sub(r" -- .*$", " -- true", code)
        code = re.sub(r"^make;", "true;", code)
        code = re.sub(r"(--local) (\w+)", r"\1 %s" % self.shm, code)
        words = shlex.split(code, posix=True) if "$(" not in code else code.split()
        if words[0] == "curl":
            return "curl -f " + code[len("curl "):]
        if words[0] == "semad":  # one server, started one way then another
            m = re.search(r"--listen \S*:(\d+)", code)
            return "__stop_semad\n%s &\n__semad=$!\n__listening %s $__semad" % (code, m.group(1))
        if words[:2] == ["sema", "watch"]:
            return code + " >/dev/null &"
        return code

    def script(self, lines):
        prelude = [
            "set -e -o pipefail",
            "trap 'echo \"@@failed at: $BASH_COMMAND\" >&2' ERR",
            "trap 'kill $(jobs -p) 2>/dev/null; sema rm --local -f %s 2>/dev/null; true' EXIT"
            % self.shm,
            # a bounded wait for semad's port; semad exiting meanwhile is a failure
            "__listening() { for _ in $(seq 200); do kill -0 $2 2>/dev/null || "
            "{ echo \"semad exited (port $1)\" >&2; return 1; }; "
            "(exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.05; done; "
            "echo \"semad does not listen on $1\" >&2; return 1; }",
            "__stop_semad() { [ -z \"${__semad:-}\" ] || { kill $__semad; wait $__semad || true; }; }",
        ]
        body = [x for x in (self.line(ln) for ln in lines) if x]
        return "\n".join(prelude + body) + "\n"


def tls_files(d):
    """ca.pem, and server.pem and server.key it signed (for localhost), in `d`."""
    c = Certs()
    try:
        c.ca("ca")
        c.issue("server", "ca", "localhost")
        for name in ("ca.pem", "server.pem", "server.key"):
            shutil.copy(c.path(name), os.path.join(d, name))
    finally:
        c.close()


def run_examples(page):
    tmp = tempfile.mkdtemp(prefix="sema-man-")
    try:
        tls_files(tmp)
        with fx.Semad() as s:
            lines = examples(page)
            script = Session(tmp, lines, str(s.port)).script(lines)
            env = dict(os.environ)
            for k in ("SEMA_TOKEN", "SEMA_CACERT", "SEMA_CERT", "SEMA_CERT_KEY"):
                env.pop(k, None)
            env["SEMA_SERVER"] = s.url("")
            env["PATH"] = os.path.dirname(fx.semad_path()) + os.pathsep + env["PATH"]
            p = subprocess.run(["bash", "-c", script], cwd=tmp, env=env, capture_output=True,
                               text=True, timeout=60 * fx.SLOW, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, "the EXAMPLES of %s did not run (%d):\n--- script\n%s\n" \
            "--- output\n%s%s" % (page, p.returncode, script, p.stdout, p.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_semad_examples_run():
    run_examples("semad.1")


def test_sema_examples_run():
    run_examples("sema.1")


@fx.not_through_proxy("no HTTP request")
def test_semad_defaults_are_those_of_its_help():
    """Each `Default X.` of an option in semad.1 is what `semad --help` says, in its words."""
    text = man_page("semad.1")
    man = {}
    for item in re.split(r"^\.TP\n", text, flags=re.M)[1:]:
        item = roff_text(item.split("\n.SH")[0])
        m = re.match(r"\.B[IR]? --([a-z-]+)", item)
        d = re.search(r"Default ([^\s.]+(?:\.\d+)?)[.;]", item)
        if m and d:
            man[m.group(1)] = d.group(1)
    out = subprocess.run([fx.semad_path(), "--help"], capture_output=True, text=True,
                         timeout=30).stdout + "\n"
    helps = dict(re.findall(r"^\s+--([a-z-]+)\s.*?default (\S+?)[;\s]", out, re.M))
    assert len(man) > 20, man
    differ = {k: (v, helps.get(k)) for k, v in man.items() if k in helps and helps[k] != v}
    assert not differ, "semad.1 gives other defaults than semad --help: %r" % differ


if __name__ == "__main__":
    fx.main(globals())
