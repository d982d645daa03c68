#!/usr/bin/env python3
"""metrics_check: the demo's /metrics, read by Prometheus' own parser.

Reads a text exposition on stdin and parses it with prometheus_client's
text_string_to_metric_families (Debian: python3-prometheus-client), the
parser a scraper uses, never with string matching. Then checks:

  - every family below is there once, with its type (no family is left
    untyped: each has its TYPE line);
  - every per-loop family has one sample for each of the LOOPS loops;
  - every value is a finite, non-negative number (the utilisation a
    ratio in [0, 1]);
  - the summaries carry the quantiles 0.5 and 0.99;
  - the refusal counters name every cause of TERN_REFUSAL_MAP;
  - tern_pool_threads equals THREADS.

Usage: metrics_check.py LOOPS THREADS [MIN_QUEUE_FULL] < exposition.
MIN_QUEUE_FULL (default 0): the least tern_pool_refusals_total with cause
queue_full. Prints what it found wrong and exits 1; exits 0 when all holds.
A malformed exposition makes the parser raise: that is a failure too.
"""
import math
import sys

from prometheus_client.parser import text_string_to_metric_families

LOOP_FAMILIES = {
    "tern_loop_turns": "counter",
    "tern_loop_posts": "counter",
    "tern_loop_wake_syscalls": "counter",
    "tern_loop_events": "counter",
    "tern_loop_busy_seconds": "counter",
    "tern_loop_idle_seconds": "counter",
    "tern_loop_utilisation_ratio": "gauge",
    "tern_loop_live_operations": "gauge",
    "tern_loop_undelivered": "gauge",
    "tern_loop_undelivered_peak": "gauge",
    "tern_loop_lag_seconds": "summary",
    "tern_demo_connections": "gauge",
    "tern_demo_requests": "counter",
}
OTHER_FAMILIES = {
    "tern_pool_threads": "gauge",
    "tern_pool_busy": "gauge",
    "tern_pool_queued": "gauge",
    "tern_pool_queued_peak": "gauge",
    "tern_pool_reserved": "gauge",
    "tern_pool_long_threads": "gauge",
    "tern_pool_long_busy": "gauge",
    "tern_pool_overflow_threads": "gauge",
    "tern_pool_stalls": "counter",
    "tern_pool_overflow_threads_started": "counter",
    "tern_pool_overflow_threads_retired": "counter",
    "tern_pool_jobs": "counter",
    "tern_pool_refusals": "counter",
    "tern_pool_queue_wait_seconds": "summary",
    "tern_pool_run_seconds": "summary",
    "tern_demo_owners": "gauge",
    "tern_demo_owner_jobs": "gauge",
    "tern_demo_owner_cap": "gauge",
    "tern_demo_responses": "counter",
    "tern_demo_shed": "counter",
    "tern_demo_refusals": "counter",
}
CAUSES = {"queue_full", "long_ceiling", "undelivered", "operations", "owner_cap", "shutdown", "threads"}
SUMMARIES = [name for name, kind in {**LOOP_FAMILIES, **OTHER_FAMILIES}.items() if kind == "summary"]


def main():
    loops = int(sys.argv[1])
    threads = int(sys.argv[2])
    min_queue_full = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    text = sys.stdin.read()
    problems = []
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser's own verdict: malformed
        print(f"FAIL: the exposition does not parse: {type(e).__name__}: {e}")
        return 1

    seen = {}
    for f in families:
        if f.name in seen:
            problems.append(f"family {f.name} appears twice")
        seen[f.name] = f
        if f.type in ("unknown", "untyped"):
            problems.append(f"family {f.name} has no TYPE")
        for s in f.samples:
            v = s.value
            if not isinstance(v, (int, float)) or math.isnan(v) or math.isinf(v) or v < 0:
                problems.append(f"{s.name}{s.labels} is not a finite non-negative number: {v!r}")

    for name, kind in {**LOOP_FAMILIES, **OTHER_FAMILIES}.items():
        f = seen.get(name)
        if f is None:
            problems.append(f"family {name} ({kind}) is missing")
        elif f.type != kind:
            problems.append(f"family {name} is a {f.type}, want a {kind}")

    for name in LOOP_FAMILIES:
        f = seen.get(name)
        if f is None:
            continue
        got = {s.labels.get("loop") for s in f.samples}
        want = {str(i) for i in range(loops)}
        if got != want:
            problems.append(f"{name} has samples for loops {sorted(got, key=str)}, want {sorted(want)}")

    for name in SUMMARIES:
        f = seen.get(name)
        if f is None:
            continue
        quantiles = {s.labels.get("quantile") for s in f.samples if s.name == name}
        for q in ("0.5", "0.99"):
            if q not in quantiles:
                problems.append(f"summary {name} lacks quantile {q}")

    if "tern_loop_utilisation_ratio" in seen:
        for s in seen["tern_loop_utilisation_ratio"].samples:
            if not 0.0 <= s.value <= 1.0:
                problems.append(f"utilisation of loop {s.labels.get('loop')} is {s.value}, not a ratio")

    for name in ("tern_pool_refusals", "tern_demo_refusals"):
        if name in seen:
            causes = {s.labels.get("cause") for s in seen[name].samples}
            if causes != CAUSES:
                problems.append(f"{name} names causes {sorted(causes, key=str)}, want {sorted(CAUSES)}")
    if "tern_pool_refusals" in seen:
        qf = [s.value for s in seen["tern_pool_refusals"].samples if s.labels.get("cause") == "queue_full"]
        if qf and qf[0] < min_queue_full:
            problems.append(f"queue_full refusals {qf[0]} < {min_queue_full}")

    if "tern_pool_threads" in seen:
        v = seen["tern_pool_threads"].samples[0].value
        if v != threads:
            problems.append(f"tern_pool_threads is {v}, want {threads}")

    for p in problems:
        print(f"FAIL: {p}")
    if not problems:
        print(f"ok: {len(families)} families parsed, every value a number")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
