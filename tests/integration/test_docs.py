# SPDX-License-Identifier: MIT
"""test_docs.py - every fenced shell, C and Python example of README.md and docs/*.md runs as written,
against a real semad at the address the documents use (127.0.0.1:7070).

How a page's blocks are read (the info string after the opening fence):
- `sh`, `bash`, `shell`: commands. `console`: lines starting with `$ ` are commands (a line
  ending in a backslash continues onto the next), the other lines are their output, which
  is compared with what the command printed (stdout and stderr; below).
- `c`: a whole program, compiled against this build's libsema and libsema-client and run.
- `python`: a whole program, run by this test's interpreter with the Python client of the
  source tree (clients/python/src) on its PYTHONPATH.
  A `text` block right after a `c` or `python` one (a blank line between) is that program's
  output: what it prints (stdout and stderr) is compared with it as a console block's is.
- anything else (`text`, `json`, `cmake`, `ts`, `yaml`, ...) is not run. A fence with no
  info string fails the test: say `text` for output and `sh`/`console` for commands.
An HTML comment on the line before a block changes it:
- `<!-- norun: why -->` the block is not run (the test prints each, with its reason);
- `<!-- file: NAME -->` the block is written to NAME in the page's directory when the
  session reaches it (for a later block to compile or read), and not run by itself.
- `<!-- vary: KEY[, KEY...] -->` (console blocks): the values that change from run to run.
  Each KEY is a JSON member whose value is any value of the same type, wherever it is in a
  JSON document of the output (`lease`, `expires_at`), or a `KEY: value` line whose value is
  anything (an event stream's `id`).

How a console block's output is compared: the lines shown after a command are what it must
print, and a command shown without output must print nothing. The output of a command run in
the background (`... &`) is compared at the end of the block, as a terminal shows it after
`wait`. Trailing blanks do not count. Output shown as a JSON document (on one line, or wrapped
over several for reading) is compared as JSON with what was printed: the same members, in any
order. Elsewhere `...` stands for any text within a line (`"lease":"..."`), and a line of
`...` alone for any number of lines.

A page's examples leave nothing behind: when they are done, the page's semad holds no
semaphore, (where the page has one of its own) its /dev/shm no file, and the directory they
ran in no file or directory they made (but the programs a `file:` block shows in full and
what `cc -o` builds of them, which the reader keeps), as the user who ran them on their own
semad and machine would want.

Each page runs in one bash session (`set -e -o pipefail`): its blocks in order, so a
variable set in one block is there in the next. The session's directory holds links to the
source tree's top-level entries (`build` is this build) and `./sema-data`, the data of a
semad started for the page alone on 127.0.0.1:7070 with its defaults, as `make run` starts
it. PATH, PKG_CONFIG_PATH and LD_LIBRARY_PATH point at a `cmake --install` of this build,
as after `make install` (in a sanitizer build, `cc` adds the sanitizer's runtime, which
programs linked with the libraries need). Each page gets its own network and /dev/shm (`unshare --net
--mount`), so the fixed port and the machine-wide semaphore names of the examples meet no
one else's; where unshare is not allowed, the pages run one at a time against a semad on
an ephemeral port that the examples' address is rewritten to.
"""
import concurrent.futures
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402

SHELL = {"sh", "bash", "shell", "console"}
# Whole programs: the file suffix, the session's function that runs one, the argument's suffix.
PROGRAMS = {"c": (".c", "__c", ""), "python": (".py", "__py", ".py")}
PAGE_TIMEOUT = 90 if fx.SLOW == 1 else 100  # seconds for one page (semad included); CTest gives 120
ADDRESSES = ("127.0.0.1:7070", "localhost:7070")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)[^`]*$")
MARK = re.compile(r"^\s*<!--\s*(norun|file|vary):\s*(.*?)\s*-->\s*$")


def pages():
    src = fx.source_dir()
    found = [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md")))
    return [p for p in found if os.path.isfile(p)]


class Block:
    def __init__(self, page, line, lang, body, mark):
        self.page, self.line, self.lang, self.body = page, line, lang, body
        self.norun = mark[1] if mark and mark[0] == "norun" else None
        self.file = mark[1] if mark and mark[0] == "file" else None
        self.vary = set(re.split(r"[,\s]+", mark[1])) - {""} if mark and mark[0] == "vary" else set()

    def where(self):
        return "%s:%d" % (os.path.relpath(self.page, fx.source_dir()), self.line)


def blocks(page):
    """The fenced blocks of a page, each with its language, first line and mark."""
    with open(page, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, i, mark = [], 0, None
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                mm = MARK.match(lines[i])
                mark = (mm.group(1), mm.group(2)) if mm else None
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        body = [ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[i + 1:j]]
        out.append(Block(page, i + 1, lang, body, mark))
        mark, i = None, j + 1
    return out


def console_steps(b):
    """A console block's commands, each {"lines": [(offset, line)], "shown": [output lines],
    "background": bool}."""
    steps, cont = [], False
    for k, ln in enumerate(b.body):
        if cont:
            steps[-1]["lines"].append((k, ln))
        elif ln.startswith("$ "):
            steps.append({"lines": [(k, ln[2:])], "shown": []})
        elif steps:
            steps[-1]["shown"].append(ln)
        cont = (cont or ln.startswith("$ ")) and ln.rstrip().endswith("\\")
    for st in steps:
        st["background"] = in_background(" ".join(x[1].rstrip("\\") for x in st["lines"]))
    return steps


def in_background(command):
    """Whether a shell command line ends in `&` (its trailing comment aside)."""
    lex = shlex.shlex(command, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        tokens = list(lex)
    except ValueError:
        return False
    return bool(tokens) and tokens[-1] == "&"


def console_script(b, n, emit, page):
    """Emit a console block's commands, each with its output sent to a file of its own (a
    background one's to the block's), and return what to compare them with."""
    checks = []
    steps = console_steps(b)
    for i, st in enumerate(steps):
        out = "%d-bg" % n if st["background"] else "%d-%d" % (n, i)
        for k, ln in st["lines"]:
            where = "%s:%d" % (os.path.relpath(page, fx.source_dir()), b.line + 1 + k)
            emit(("{ " if k == st["lines"][0][0] else "") + ln, where)
        emit('} >> "$DOC_OUT/%s" 2>&1' % out, b.where())
        if st["background"]:
            continue
        outputs = ["%d-%d" % (n, i)]
        if i == len(steps) - 1:
            outputs.append("%d-bg" % n)
        line = b.line + 1 + st["lines"][-1][0] + 1
        checks.append({"where": "%s:%d" % (os.path.relpath(page, fx.source_dir()), line),
                       "shown": st["shown"], "outputs": outputs, "vary": sorted(b.vary)})
    # output shown after a background command is that of the block's end
    early = [x for st in steps[:-1] if st["background"] for x in st["shown"]]
    if checks and early and not steps[-1]["background"]:
        checks[-1]["shown"] = early + checks[-1]["shown"]
    return checks


# ---- comparing what a console block shows with what was printed ----

def ellipsis_match(shown, actual):
    """`...` in `shown` stands for any text."""
    parts = [re.escape(x) for x in shown.split("...")]
    return re.fullmatch(".*?".join(parts), actual, re.S) is not None


def json_match(shown, actual, vary):
    """A shown JSON value against a printed one: a member named in `vary` may hold any value
    of its type; a shown string with `...` is a pattern."""
    if isinstance(shown, dict):
        if not isinstance(actual, dict) or set(shown) != set(actual):
            return False
        return all(type(shown[k]) is type(actual[k]) if k in vary
                   else json_match(shown[k], actual[k], vary) for k in shown)
    if isinstance(shown, list):
        return (isinstance(actual, list) and len(shown) == len(actual) and
                all(json_match(a, b, vary) for a, b in zip(shown, actual)))
    if isinstance(shown, str) and isinstance(actual, str) and "..." in shown:
        return ellipsis_match(shown, actual)
    return type(shown) is type(actual) and shown == actual


def as_json(text):
    try:
        return True, json.loads(text)
    except ValueError:
        return False, None


def line_match(shown, actual, vary):
    key = re.match(r"^([A-Za-z_][\w-]*): ", shown)
    if key and key.group(1) in vary:
        return actual.startswith(key.group(0))
    prefix = re.match(r"^((?:[A-Za-z_][\w-]*: )?)(\{.*\}|\[.*\])$", shown)
    if prefix and actual.startswith(prefix.group(1)):
        ok1, s = as_json(prefix.group(2))
        ok2, a = as_json(actual[len(prefix.group(1)):])
        if ok1 and ok2:
            return json_match(s, a, vary)
    return ellipsis_match(shown, actual)


def lines_match(shown, actual, vary):
    """Line by line; a shown line of `...` alone matches any number of lines."""
    if not shown:
        return not actual
    if shown[0].strip() == "...":
        return any(lines_match(shown[1:], actual[i:], vary) for i in range(len(actual) + 1))
    return bool(actual) and line_match(shown[0], actual[0], vary) and \
        lines_match(shown[1:], actual[1:], vary)


def output_matches(shown, printed, vary):
    shown = [x.rstrip() for x in shown]
    printed = [x.rstrip() for x in printed.split("\n")]
    while shown and not shown[-1]:
        shown.pop()
    while printed and not printed[-1]:
        printed.pop()
    if shown and "..." not in shown:
        ok1, s = as_json("\n".join(shown))
        ok2, a = as_json("\n".join(printed))
        if ok1 and ok2:
            return json_match(s, a, set(vary))
    return lines_match(shown, printed, set(vary))


def compare_outputs(checks, outdir, port):
    """The console commands whose output is not what their block shows: report lines."""
    bad = []
    for c in checks:
        printed = ""
        for name in c["outputs"]:
            path = os.path.join(outdir, name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    printed += f.read()
        shown = [readdress(x, port) if port != 7070 else x for x in c["shown"]]
        if not output_matches(shown, printed, c["vary"]):
            bad.append("%s: the output shown is not what the command printed\n--- shown\n%s\n"
                       "--- printed\n%s" % (c["where"], "\n".join(shown) or "(nothing)",
                                             printed.rstrip("\n") or "(nothing)"))
    return bad


def script_for(page, blist, cdir):
    """The bash session of one page: (script text, doc location of each script line, the
    console outputs to compare)."""
    lines, where, checks = [], [], []

    def emit(text, loc):
        lines.append(text)
        where.append(loc)

    emit('__block() { printf "%s\\n" "$1" >> "$DOC_PROGRESS"; }', "prelude")
    emit("__c() { cc -std=c11 -Wall -Wextra -Werror -I\"$DOC_SRC/include\" -o \"$1\" \"$1.c\" "
         "\"$DOC_BUILD/lib/libsema-client.a\" \"$DOC_BUILD/lib/libsema.a\" "
         "$(pkg-config --libs libcurl jansson) -pthread -lrt && \"$1\"; }", "prelude")
    emit('__py() { "$DOC_PYTHON" "$1"; }', "prelude")
    emit("trap 'echo \"@@failed at script line $LINENO (status $?)\" >&2' ERR", "prelude")
    emit("set -e -o pipefail", "prelude")
    for n, b in enumerate(blist):
        if b.norun:
            continue
        if b.file:
            emit("__block %s" % shlex.quote(b.where()), b.where())
            emit("cat > %s <<'__DOC_EOF__'" % shlex.quote(b.file), b.where())
            for k, ln in enumerate(b.body):
                emit(ln, "%s:%d" % (os.path.relpath(page, fx.source_dir()), b.line + 1 + k))
            emit("__DOC_EOF__", b.where())
        elif b.lang in PROGRAMS:
            path = os.path.join(cdir, "block%d" % n)
            with open(path + PROGRAMS[b.lang][0], "w") as f:
                f.write("\n".join(b.body) + "\n")
            emit("__block %s" % shlex.quote(b.where()), b.where())
            run = "%s %s" % (PROGRAMS[b.lang][1], shlex.quote(path + PROGRAMS[b.lang][2]))
            shown = shown_output(blist, n)
            if shown is not None:  # its output goes to the log and to a file to compare
                run = '{ %s; } 2>&1 | tee "$DOC_OUT/%d-0"' % (run, n)
                checks.append({"where": "%s:%d" % (os.path.relpath(page, fx.source_dir()),
                                                   blist[n + 1].line + 1),
                               "shown": shown, "outputs": ["%d-0" % n], "vary": []})
            emit(run, b.where())
        elif b.lang == "console":
            emit("__block %s" % shlex.quote(b.where()), b.where())
            checks += console_script(b, n, emit, page)
        elif b.lang in SHELL:
            emit("__block %s" % shlex.quote(b.where()), b.where())
            for k, ln in enumerate(b.body):
                emit(ln, "%s:%d" % (os.path.relpath(page, fx.source_dir()), b.line + 1 + k))
    return "\n".join(lines) + "\n", where, checks


def shown_output(blist, n):
    """The output a program block shows: the lines of the `text` block right after it (a
    blank line between), or None."""
    b = blist[n]
    if n + 1 >= len(blist) or blist[n + 1].lang != "text":
        return None
    end = b.line + len(b.body) + 1  # the closing fence's line
    return blist[n + 1].body if blist[n + 1].line - end <= 2 else None


def runnable(b):
    return not b.norun and (b.file or b.lang in PROGRAMS or b.lang in SHELL)


def install_prefix(tmp):
    prefix = os.path.join(tmp, "prefix")
    subprocess.run(["cmake", "--install", build_dir(), "--prefix", prefix], check=True,
                   stdout=subprocess.DEVNULL, timeout=60)
    return prefix


def build_dir():
    return os.environ.get("SEMA_BUILD_DIR") or os.path.join(fx.source_dir(), "build")


def workdir(tmp, page):
    """A directory that looks like the source tree (build = this build), of its own."""
    d = tempfile.mkdtemp(prefix="page-", dir=tmp)
    src = fx.source_dir()
    for name in os.listdir(src):
        if name.startswith(".") or name.startswith("build") or name == "sema-data":
            continue
        os.symlink(os.path.join(src, name), os.path.join(d, name))
    # build/bin and build/lib are this build's; a page that configures a build of its own
    # gets a fresh one beside them, never this one.
    os.mkdir(os.path.join(d, "build"))
    for name in ("bin", "lib"):
        os.symlink(os.path.join(build_dir(), name), os.path.join(d, "build", name))
    return d


def sanitizer_cc(d):
    """In a sanitizer build the libraries need the sanitizer's runtime in every program
    linked with them: a `cc` first on PATH that adds it. Returns its directory, or None."""
    san, real = os.environ.get("SEMA_SANITIZE"), shutil.which("cc")
    if not san or not real:
        return None
    bindir = os.path.join(d, ".cc")
    os.mkdir(bindir)
    with open(os.path.join(bindir, "cc"), "w") as f:
        f.write('#!/bin/sh\nexec %s -fsanitize=%s "$@"\n' % (shlex.quote(real), shlex.quote(san)))
    os.chmod(os.path.join(bindir, "cc"), 0o755)
    return bindir


def session_env(prefix, port, d):
    libdir = next(p for p in glob.glob(os.path.join(prefix, "lib*")) if os.path.isdir(p))
    env = dict(os.environ)
    path = os.path.join(prefix, "bin") + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    cc = sanitizer_cc(d)
    env.update({
        "PATH": (cc + os.pathsep if cc else "") + path,
        "PKG_CONFIG_PATH": os.path.join(libdir, "pkgconfig"),
        "LD_LIBRARY_PATH": libdir,
        "DOC_SRC": fx.source_dir(),
        "DOC_BUILD": build_dir(),
        "DOC_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(
            [os.path.join(fx.source_dir(), "clients", "python", "src")]
            + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
        "DOC_PROGRESS": os.path.join(d, ".progress"),
        "DOC_OUT": os.path.join(d, ".out"),
        "HOME": d,
    })
    for k in ("SEMA_SERVER", "SEMA_LISTEN", "SEMA_DATA"):
        env.pop(k, None)
    if port != 7070:
        env["SEMA_SERVER"] = "http://127.0.0.1:%d" % port
    return env


def readdress(text, port):
    for a in ADDRESSES:
        text = text.replace(a, "127.0.0.1:%d" % port)
    return text


def left_behind(s, own_shm):
    """What a page's examples left on its semad (semaphores) and, when the page has a
    /dev/shm of its own, in it (shared-memory semaphores)."""
    st, body = s.json("GET", "/v1/semaphores?limit=1000")
    left = ["semaphore %s" % x["name"] for x in (body or {}).get("semaphores", [])] \
        if st == 200 else ["(GET /v1/semaphores answered %d)" % st]
    if own_shm:
        left += ["/dev/shm/%s" % n for n in sorted(os.listdir("/dev/shm"))]
    return left


def files_made(d, before, blist):
    """What the examples wrote into the page's directory `d` (the names in it at the start
    are `before`, and semad's data): but the programs the page shows in full (`file:`
    blocks) and what `cc -o` makes of them, which the reader keeps, and the session's own
    dot files."""
    kept = set(before) | {"sema-data"} | {b.file for b in blist if b.file}
    for b in blist:
        if runnable(b) and b.lang in SHELL:
            kept |= set(re.findall(r"\bcc\b[^\n]*?(?:\\\n[^\n]*?)*\s-o\s+([\w.-]+)", "\n".join(b.body)))
    return ["./%s" % n for n in sorted(os.listdir(d)) if n not in kept and not n.startswith(".")]


def run_session(page, d, prefix, port):
    """Inside the page's namespaces (or not): start semad, run the page's script. Returns
    (ok, report)."""
    blist = blocks(page)
    cdir = os.path.join(d, ".c")
    os.mkdir(cdir)
    script, where, checks = script_for(page, blist, cdir)
    outdir = os.path.join(d, ".out")
    os.mkdir(outdir)
    before = os.listdir(d)
    with fx.Semad("--listen", "127.0.0.1:%d" % port, durability="strict",
                  data=os.path.join(d, "sema-data")) as s:
        if port == 0:  # no namespace of its own: the examples' address becomes semad's
            script = readdress(script, s.semad_port)
            for c in glob.glob(os.path.join(cdir, "*.c")) + glob.glob(os.path.join(cdir, "*.py")):
                with open(c) as f:
                    text = readdress(f.read(), s.semad_port)
                with open(c, "w") as f:
                    f.write(text)
        with open(os.path.join(d, ".script.sh"), "w") as f:
            f.write(script)
        log = open(os.path.join(d, ".log"), "w+")
        p = subprocess.Popen(["bash", os.path.join(d, ".script.sh")], cwd=d, stdin=subprocess.DEVNULL,
                             stdout=log, stderr=subprocess.STDOUT,
                             env=session_env(prefix, s.semad_port, d), start_new_session=True)
        try:
            rc = p.wait(PAGE_TIMEOUT)
        except subprocess.TimeoutExpired:
            rc = "timeout after %ds" % PAGE_TIMEOUT
        finally:
            try:  # what the page left running in the background goes too
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait()
        log.seek(0)
        out = log.read()
        semad_log = s.log()
        left = left_behind(s, port != 0) + files_made(d, before, blist) if rc == 0 else []
    bad = compare_outputs(checks, outdir, s.semad_port) if rc == 0 else []
    if left:
        bad.append("%s: the examples leave behind %s: delete what they make, as a user would "
                   "want" % (os.path.relpath(page, fx.source_dir()), ", ".join(left)))
    if rc == 0 and not bad:
        return True, out
    if rc == 0:
        return False, "\n\n".join(bad)
    progress = open(os.path.join(d, ".progress")).read().split() if os.path.exists(
        os.path.join(d, ".progress")) else []
    m = re.search(r"@@failed at script line (\d+)", out)
    at = where[int(m.group(1)) - 1] if m and int(m.group(1)) <= len(where) else None
    report = ["%s: the example at %s did not run (%s)" % (
        os.path.relpath(page, fx.source_dir()), at or (progress[-1] if progress else "?"), rc)]
    report += ["--- session output (last 60 lines)"] + out.splitlines()[-60:]
    report += ["--- semad log (last 20 lines)"] + semad_log[-20:]
    return False, "\n".join(report)


def isolation():
    """The command that gives a page its own network and /dev/shm, or None."""
    cmd = ["unshare", "--net", "--mount"] + (["--map-root-user"] if os.geteuid() != 0 else [])
    try:  # all of it: a sandbox may allow the namespaces but not the mount or the loopback
        ok = subprocess.run(cmd + [sys.executable, os.path.abspath(__file__), "--probe"],
                            capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return cmd if ok else None


def lo_up():
    """Bring up the loopback of a fresh network namespace (SIOCGIFFLAGS/SIOCSIFFLAGS)."""
    import fcntl
    import socket
    import struct
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, 0x8913, req))[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", flags | 1))


def private_net_and_shm():
    lo_up()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", "/dev/shm"], check=True)


def inner(page, d, prefix):
    """Entry point inside unshare: a private loopback and /dev/shm, then the session."""
    private_net_and_shm()
    ok, report = run_session(page, d, prefix, 7070)
    print(report)
    sys.exit(0 if ok else 1)


def run_page(page, tmp, prefix, iso):
    d = workdir(tmp, page)
    t0 = time.monotonic()
    if iso is None:
        ok, report = run_session(page, d, prefix, 0)
    else:
        p = subprocess.run(iso + [sys.executable, os.path.abspath(__file__), "--page", page, d,
                                  prefix], capture_output=True, text=True,
                           timeout=PAGE_TIMEOUT + 30)
        ok, report = p.returncode == 0, p.stdout + p.stderr
    return ok, report, time.monotonic() - t0


def test_every_block_is_tagged():
    """A fence without an info string cannot be told apart: command, output or code."""
    untagged = ["%s" % b.where() for p in pages() for b in blocks(p) if not b.lang]
    assert not untagged, "fenced blocks without a language (text for output, sh or " \
        "console for commands): %s" % ", ".join(untagged)


def test_console_output_is_compared_strictly():
    """The comparison of a console block's output: what passes, and what must not."""
    m = output_matches
    # JSON: the same members in any order, wrapped or not; a member named in vary, any value
    # of its type; `...` inside a string, any text
    assert m(['{"a":1,', ' "b":"x"}'], '{"b":"x","a":1}\n', [])
    assert not m(['{"a":1}'], '{"a":2}\n', [])
    assert not m(['{"a":1}'], '{"a":1,"b":2}\n', []), "a member printed but not shown"
    assert m(['{"lease":"abc","n":1}'], '{"lease":"zzz","n":1}', ["lease"])
    assert not m(['{"lease":"abc"}'], '{"lease":5}', ["lease"]), "vary keeps the type"
    assert m(['{"t":"..."}'], '{"t":"anything"}', []) and not m(['{"t":"a..."}'], '{"t":"b"}', [])
    # text: line by line, `...` within a line, a `...` line for any lines, vary for `key: `
    assert m(["Deletion Successful"], "Deletion Successful\n", [])
    assert not m(["Deletion Successful"], "Deletion successful\n", [])
    assert m(["a", "...", "z"], "a\nb\nc\nz\n", []) and not m(["a", "z"], "a\nb\nz\n", [])
    assert m(["id: 1-1", 'data: {"x":"...","n":2}'], 'id: 99-2\ndata: {"n":2,"x":"q"}', ["id"])
    assert not m(["id: 1-1"], "id: 99-2", [])
    # nothing shown: nothing may be printed
    assert m([], "", []) and not m([], "something\n", [])
    # commands, continuations, and what runs in the background
    b = Block("x.md", 1, "console", ["$ a \\", "  b", "out", "$ c & # bg", "$ d; wait", "late"],
              None)
    steps = console_steps(b)
    assert [[x[1] for x in st["lines"]] for st in steps] == [["a \\", "  b"], ["c & # bg"],
                                                            ["d; wait"]]
    assert [st["background"] for st in steps] == [False, True, False]
    assert [st["shown"] for st in steps] == [["out"], [], ["late"]]
    assert not in_background("a && b") and in_background("a &") and not in_background("a # &")


def test_examples_run_as_written():
    tmp = tempfile.mkdtemp(prefix="sema-docs-")
    try:
        prefix = install_prefix(tmp)
        iso = isolation()
        if iso is None:
            print("unshare is not allowed here: pages run one at a time on an ephemeral port")
        all_blocks = [(p, blocks(p)) for p in pages()]
        todo = [p for p, bl in all_blocks if any(runnable(b) for b in bl)]
        norun = [b for _, bl in all_blocks for b in bl if b.norun and
                 (b.lang in PROGRAMS or b.lang in SHELL)]
        ran = sum(1 for _, bl in all_blocks for b in bl if runnable(b))
        failed = []
        with concurrent.futures.ThreadPoolExecutor(3 if iso else 1) as pool:
            for page, (ok, report, secs) in zip(todo, pool.map(
                    lambda p: run_page(p, tmp, prefix, iso), todo)):
                print("%s %s (%.1fs)" % ("ok" if ok else "FAILED",
                                         os.path.relpath(page, fx.source_dir()), secs))
                if not ok:
                    failed.append(report)
        print("%d blocks run from %d pages; %d not run, as marked:" % (ran, len(todo), len(norun)))
        for b in norun:
            print("  %s  %s" % (b.where(), b.norun))
        assert not failed, "\n\n".join(failed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--page":
        inner(*sys.argv[2:])
    if sys.argv[1:] == ["--probe"]:
        private_net_and_shm()
        sys.exit(0)
    fx.main(globals())
