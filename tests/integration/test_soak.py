# SPDX-License-Identifier: MIT
"""test_soak.py - bench/soak itself, in a run of half a minute: it starts semad (and Redis),
drives the mix at its rate, samples every series at each interval, and computes slopes and
checks. The verdict of so short a run means nothing (warm-up never ends): the long runs are
in docs/performance.md; here only the machinery is checked (--no-verdict)."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import redis_fixture as rf  # noqa: E402
import semad_fixture as fx  # noqa: E402

ROOT = fx.source_dir()
BUILD = os.environ.get("SEMA_BUILD_DIR") or os.path.join(ROOT, "build")
SOAK = os.path.join(ROOT, "bench", "soak")

# What every sample has, on either engine.
COMMON = ("t_min", "rss_kib", "heap_in_use_kib", "heap_free_kib", "heap_arena_kib", "fds",
          "p50_us", "p99_us", "ops_per_s", "errors", "missed", "cpu_pct",
          "semad_http_connections", "semad_event_streams")


def soak(tmp, *args):
    out = os.path.join(tmp, "soak.json")
    p = subprocess.run([sys.executable, SOAK, BUILD, "--minutes", "0.5", "--sample-s", "5",
                        "--rate", "200", "--no-verdict", "--json", out] + list(args),
                       capture_output=True, text=True, timeout=100 * fx.SLOW)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    with open(out) as f:
        return json.load(f), p.stdout


def check_run(r, stdout, own):
    rows = r["samples"]
    assert 5 <= len(rows) <= 7, rows  # one every 5 s for 30 s
    assert [round(x["t_min"] * 12) for x in rows] == list(range(1, len(rows) + 1)), rows
    for row in rows:
        for k in COMMON + own:
            assert k in row, (k, row)
        assert row["rss_kib"] > 0 and row["fds"] > 0, row
        # a sanitizer's allocator has no statistics of glibc's: the heap reads 0 there
        assert row["heap_in_use_kib"] > 0 or os.environ.get("SEMA_SANITIZE"), row
        assert row["errors"] == 0 and row["semad_http_connections"] >= 1, row
        assert 150 <= row["ops_per_s"] <= 250, row  # the rate asked for, 200/s
    for k in ("rss_kib", "heap_in_use_kib", "p99_us") + own:
        s = r["series"][k]
        assert set(s) == {"at_warmup", "at_end", "max_rise", "slope_per_min",
                          "slope_last_half_per_min"}, s
        assert s["at_end"] == rows[-1][k], (k, s)
    whats = {c["what"] for c in r["checks"]}
    assert {"rss_kib", "heap_in_use_kib", "p99", "errors", "rate"} <= whats, whats
    assert r["summary"]["errors"] == 0 and sum(r["summary"]["mix"].values()) > 0, r["summary"]
    assert "slope/min" in stdout and stdout.rstrip().splitlines()[-1].startswith("soak: "), stdout


def test_embedded_run_samples_and_computes_slopes():
    tmp = fx.temp_dir("soak-test-")
    r, out = soak(tmp)
    check_run(r, out, ("data_kib", "semad_leases", "semad_tickets", "semad_lock_keys"))
    assert "data_kib" in {c["what"] for c in r["checks"]}


def test_redis_run_samples_and_computes_slopes():
    rf.need_redis_engine()
    tmp = fx.temp_dir("soak-test-")
    r, out = soak(tmp, "--engine", "redis")
    check_run(r, out, ("redis_used_kib", "redis_persistent_keys"))
    assert {"redis_used_kib", "redis_persistent_keys"} <= {c["what"] for c in r["checks"]}
    assert "data_kib" not in r["samples"][0]


if __name__ == "__main__":
    fx.main(globals())
