# SPDX-License-Identifier: MIT
"""measure.py - helpers for bench/peers/run.sh: run one load generator with the CPU time of the
servers it loads (from /proc/PID/stat) and its own (getrusage), turn its report into one JSON
object, keep the best round, and print figure and ratio lines. Python 3 stdlib only.

  measure.py run --servers PID[,PID] -- CMD...   JSON of CMD (a JSON line, or wrk's text report)
                                                 plus server_cpu_us_per_request and
                                                 generator_cpu_us_per_request
  measure.py best JSON_A JSON_B                   the one with the higher requests_per_s
  measure.py figure NAME JSON FIELD...            "figure NAME field=value ..."
  measure.py ratio NAME NUM DEN GOAL              "ratio NAME value=X goal=>=GOAL met=yes|no"
  measure.py get JSON FIELD                       one field ("" when absent)
"""
import json
import os
import re
import resource
import subprocess
import sys


def server_ticks(pids):
    """User+system clock ticks of every PID (fields 14 and 15 of /proc/PID/stat)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        total += int(rest[11]) + int(rest[12])
    return total


def us(text):
    """wrk's duration text (e.g. 783.00us, 2.23ms, 1.02s) in microseconds."""
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not m:
        return None
    return float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6, "m": 6e7}[m.group(2)]


def parse_wrk(out):
    """The fields of wrk's --latency report that the figures use; errors are non-2xx answers
    plus socket errors."""
    j = {"errors": 0}
    for line in out.splitlines():
        f = line.split()
        if line.startswith("Requests/sec:"):
            j["requests_per_s"] = float(f[1])
        elif " requests in " in line:
            j["requests"] = int(f[0])
        elif line.strip().startswith("50%"):
            j["p50_us"] = us(f[1])
        elif line.strip().startswith("99%"):
            j["p99_us"] = us(f[1])
        elif line.startswith("  Non-2xx or 3xx responses:"):
            j["errors"] += int(f[-1])
        elif line.startswith("  Socket errors:"):
            j["errors"] += sum(int(x.rstrip(",")) for x in f[3::2])
    return j


def parse(out):
    for line in out.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return parse_wrk(out)


def cmd_run(argv):
    sep = argv.index("--")
    pids = [p for p in argv[argv.index("--servers") + 1].split(",") if p]
    cmd = argv[sep + 1 :]
    hz = os.sysconf("SC_CLK_TCK")
    t0 = server_ticks(pids)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=300)
    t1 = server_ticks(pids)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    j = parse(r.stdout)
    n = j.get("requests") or 0
    j["exit"] = r.returncode
    j["server_cpu_us_per_request"] = round((t1 - t0) * 1e6 / hz / n, 2) if n else None
    if "generator_cpu_us_per_request" not in j:
        cpu = ru.ru_utime + ru.ru_stime
        j["generator_cpu_us_per_request"] = round(cpu * 1e6 / n, 2) if n else None
    print(json.dumps(j))


def cmd_best(argv):
    a, b = (json.loads(x) if x else None for x in argv[:2])
    if a is None or b is None:
        print(json.dumps(a or b or {}))
        return
    print(json.dumps(a if (a.get("requests_per_s") or 0) >= (b.get("requests_per_s") or 0) else b))


def cmd_figure(argv):
    name, j = argv[0], json.loads(argv[1] or "{}")
    extra = [a for a in argv[2:] if "=" in a]
    fields = [a for a in argv[2:] if "=" not in a]
    vals = [f"{k}={'' if j.get(k) is None else j.get(k)}" for k in fields]
    print(" ".join(["figure", name] + extra + vals))


def cmd_ratio(argv):
    name, num, den, goal = argv[0], float(argv[1] or 0), float(argv[2] or 0), float(argv[3])
    v = num / den if den > 0 else 0.0
    print(f"ratio {name} value={v:.3f} goal=>={goal:g} met={'yes' if v >= goal else 'no'}")


def cmd_get(argv):
    v = json.loads(argv[0] or "{}").get(argv[1])
    print("" if v is None else v)


COMMANDS = {"run": cmd_run, "best": cmd_best, "figure": cmd_figure, "ratio": cmd_ratio, "get": cmd_get}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    COMMANDS[sys.argv[1]](sys.argv[2:])
