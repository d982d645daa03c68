/*
 * Static probes (USDT): named points in the library that a tracer
 * (bpftrace, perf, SystemTap) can attach to in a running process without a
 * rebuild, as `usdt:/path/libtern.so:tern:<name>`. Here, in the lowest
 * layer, so the pool (job_started) and the runtime (everything else) both
 * reach it.
 *
 * Cost. With <sys/sdt.h> (meson option `probes`, on where the header
 * exists) a probe is one nop instruction plus the moves that put its
 * arguments where the note says they are, and an ELF note in
 * .note.stapsdt; a tracer turns the nop into a trap only while it is
 * attached. Without the header TERN_PROBE expands to nothing: the
 * arguments are not even evaluated, so a probe must never be the only user
 * of a value it passes.
 *
 * TERN_PROBE_MAP is the one list of probes: X(name, arguments, where). The
 * firing sites use the names; docs/api.md ("Static probes") lists every
 * entry, and test/probes_test.sh expects each in the built library's notes
 * (both read this list). A probe's arguments never change meaning once
 * shipped: a new argument goes at the end, a changed one is a new probe.
 */
#ifndef TERN_PROBE_H
#define TERN_PROBE_H

#define TERN_PROBE_MAP(X)                                                                     \
    X(turn_start, "loop", "a turn begins (before step 1)")                                    \
    X(turn_end, "loop, turns", "a turn ended (after step 5); turns: the loop's count so far") \
    X(job_submitted, "loop, id, job, occupancy",                                              \
      "the pool accepted a job (id 0 for an internal one)")                                   \
    X(job_refused, "loop, cause, cause_name, jobs",                                           \
      "a submission was refused: cause is its tern_refusal, cause_name tern_refusal_name's, " \
      "jobs how many it asked for (a batch is refused whole)")                                \
    X(job_started, "job, occupancy",                                                          \
      "a pool worker calls the job's work function (each step of a file request)")            \
    X(job_done, "loop, id, job, status", "the job's done callback is about to run (step 2)")  \
    X(post, "loop, fn", "tern_post admitted fn (on the posting thread)")                      \
    X(wake, "loop", "a producer writes the loop's wake descriptor (the syscall is counted)")  \
    X(stall, "loop, bounded_in_flight, spin_ns",                                              \
      "with bounded jobs in flight the loop spun its whole budget for a completion, found "   \
      "none, and goes to sleep: the pool is behind as the loop sees it")

#ifdef TERN_HAVE_SDT
#define SDT_USE_VARIADIC 1 /* STAP_PROBEV: one macro for any number of arguments */
#include <sys/sdt.h>
#define TERN_PROBE(name, ...) STAP_PROBEV(tern, name, __VA_ARGS__)
#else
#define TERN_PROBE(name, ...) ((void)0)
#endif

#endif
