# SPDX-License-Identifier: MIT
"""test_cli_help.py - one help text per command: `sema help VERB` prints what `sema VERB
--help` prints (and the same with --local), and every option a --help names is in the man
page (docs/man/sema.1, docs/man/semad.1)."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402

SEMA = os.environ.get("SEMA_BIN") or os.path.join(fx.source_dir(), "build", "bin", "sema")
LOCAL_TOO = ("run", "ls", "rm")


def run(*args):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def verbs():
    rc, out, _ = run(SEMA, "help")
    assert rc == 0, out
    found = re.findall(r"^  ([a-z][a-z-]+)\s", out, re.M)
    assert "run" in found and "acquire" in found, out
    return sorted(set(found))


def options(text):
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", text))


def man_options(page):
    with open(os.path.join(fx.source_dir(), "docs", "man", page)) as f:
        text = re.sub(r"\\f[BIRP]", "", f.read())  # font changes: \fB--ttl\fR
        return options(text.replace("\\-", "-"))


@fx.not_through_proxy("no HTTP request")
def test_help_verb_equals_verb_help():
    for v in verbs():
        assert run(SEMA, "help", v) == run(SEMA, v, "--help"), v
        if v in LOCAL_TOO:
            assert run(SEMA, "help", v, "--local") == run(SEMA, v, "--local", "--help"), v


@fx.not_through_proxy("no HTTP request")
def test_every_option_of_help_is_in_the_man_pages():
    man = man_options("sema.1")
    missing = {}
    for v in verbs():
        texts = [run(SEMA, v, "--help")[1]]
        if v in LOCAL_TOO:
            texts.append(run(SEMA, v, "--local", "--help")[1])
        for opt in set().union(*(options(t) for t in texts)) - man:
            missing.setdefault(opt, []).append(v)
    assert not missing, "sema options not in docs/man/sema.1: %r" % missing
    out = run(fx.semad_path(), "--help")[1]
    gone = options(out) - man_options("semad.1") - {"--flag"}  # "usage: semad [--flag VALUE]"
    assert not gone, "semad options not in docs/man/semad.1: %r" % sorted(gone)



@fx.not_through_proxy("no HTTP request")
def test_overview_keeps_one_summary_column():
    out = run(SEMA, "--help")[1]
    rows = re.findall(r"^  ([a-z][a-z-]+)( +)\S", out, re.M)
    columns = {len(v) + len(gap) for v, gap in rows}
    assert len(rows) > 20 and len(columns) == 1, rows


@fx.not_through_proxy("no HTTP request")
def test_a_blank_line_follows_every_usage_line():
    for v in verbs():
        for args in [[v, "--help"]] + ([[v, "--local", "--help"]] if v in LOCAL_TOO else []):
            lines = run(SEMA, *args)[1].splitlines()
            assert len(lines) < 3 or lines[1] == "", (args, lines[:3])


def complete(*words):
    """What the bash completion of scripts/completion/sema.bash offers for `words` (the
    last one being completed), with this build's sema first on PATH."""
    script = os.path.join(fx.source_dir(), "scripts", "completion", "sema.bash")
    cmd = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _sema; '
           'printf "%s\\n" "${COMPREPLY[@]}"')
    env = dict(os.environ, PATH=os.path.dirname(os.path.abspath(SEMA)) + os.pathsep +
               os.environ.get("PATH", ""))
    p = subprocess.run(["bash", "-c", cmd, "complete", script] + list(words),
                       capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode == 0, p
    return set(p.stdout.split())


@fx.not_through_proxy("no HTTP request")
def test_bash_completion_offers_verbs_and_their_options():
    assert {"acquire", "release", "renew"} <= complete("sema", ""), complete("sema", "")
    assert complete("sema", "ac") == {"acquire"}
    assert complete("sema", "acquire", "--t") == {"--timeout", "--ttl", "--tenant"}
    assert "--capacity" in complete("sema", "run", "--local", "--c")
    # the global options, before the verb, and the verb after them
    assert complete("sema", "--se") == {"--server"}, complete("sema", "--se")
    assert "--cert-key" in complete("sema", "--cert"), complete("sema", "--cert")
    assert complete("sema", "--json", "ac") == {"acquire"}
    assert complete("sema", "-s", "http://h:1", "acquire", "--t") == {"--timeout", "--ttl",
                                                                       "--tenant"}
    assert complete("sema", "bench", "--dur") == {"--duration"}


if __name__ == "__main__":
    fx.main(globals())
