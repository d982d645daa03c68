/*
 * The test seams declared in runtime/core/testing.h: hooks into a loop's inner
 * state that only tern's own tests call. This file is built into a
 * separate static library the tests link beside libtern.a (meson.build,
 * tern-seams); the installed libraries never carry it.
 */
#include "inbound.h"
#include "loop_p.h"
#include "process_p.h"
#include "testing.h"

int64_t tern__loop_last_wait(const tern_loop *loop)
{
    return loop->last_wait;
}

const char *tern__loop_backend_name(const tern_loop *loop)
{
    return loop->backend.ops->name;
}

int tern__loop_step(const tern_loop *loop)
{
    return loop->step;
}

void tern__test_claim(tern_loop *loop)
{
    (void)tern__loop_claim(loop, "tern__test_claim");
}

void tern__test_release(tern_loop *loop)
{
    tern__loop_release(loop, NULL);
}

int tern__test_cancel_now(tern_loop *loop, tern_id id)
{
    if (tern_loop_current() == loop)
        return tern_cancel(loop, id);
    tern__test_claim(loop);
    int rc = tern_cancel(loop, id);
    tern__test_release(loop);
    return rc;
}

void tern__set_getaddrinfo(tern__getaddrinfo_fn fn)
{
    atomic_store(&tern__resolve_getaddrinfo, fn);
}

void tern__set_getnameinfo(tern__getnameinfo_fn fn)
{
    atomic_store(&tern__resolve_getnameinfo, fn);
}

void tern__test_heap_seq(tern_loop *loop, uint32_t next)
{
    loop->heap.next_seq = next;
}

tern_id tern__test_timer_gen(tern_loop *loop, tern_id id, uint32_t gen)
{
    uint32_t slot = tern__timer_slot_of(&loop->timers, id);
    TERN_INSIST(slot != TERN__SLOT_NONE);
    struct tern__timer *r = tern__timer_at(&loop->timers, slot);
    TERN_INSIST(gen >= r->gen && gen < TERN__TIMER_GEN_LIMIT);
    r->gen = gen;
    return tern__timer_id_of(&loop->timers, slot);
}

void tern__test_inbound_fresh_block(void)
{
    tern__inbound_drop_block();
}

void tern__test_inbound_blocks(struct tern__test_blocks *b)
{
    tern__inbound_blocks(b);
}

bool tern__test_reaper_running(void)
{
    return tern__reaper_running();
}

void tern__set_watch_stat(bool on)
{
    atomic_store_explicit(&tern__watch_stat_forced, on, memory_order_relaxed);
}
