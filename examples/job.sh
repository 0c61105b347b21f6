#!/bin/sh
# SPDX-License-Identifier: MIT
# job.sh - stands in for a real job in the examples of README.md and docs/: says when it
# starts and ends, and works for JOB_SECONDS (default 0.2) in between.
echo "job ${1:-?} started (pid $$)"
sleep "${JOB_SECONDS:-0.2}"
echo "job ${1:-?} done"
