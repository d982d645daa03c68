/*
 * UDP sockets: the private layout shared by udp.c (bind and close,
 * receiving, the dispatch that delivers what a socket owes), udp_opt.c
 * (connect and the socket settings), udp_send.c (the send queue, its
 * batched flush and the watcher's interest) and udp_record.c (finding,
 * queueing and watching the record). They call top-down in that order.
 *
 * A UDP socket is a loop operation (struct tern__op first), built like a
 * stream (net_p.h): its descriptor is watched through an embedded
 * `struct tern__io`; readiness and owed callbacks queue the op on the
 * ready queue and its dispatch acts in step 2; closing marks the record
 * CLOSING at once and the op stays registered until the close callback
 * has run, so tern_loop_free's drain turns until the socket owes nothing.
 *
 * Sends made from inside the socket's own dispatch (a receive callback
 * answering, a send callback sending again) are only queued: the dispatch
 * flushes the whole queue once its callbacks have run, so the replies to
 * a batch of datagrams leave in one sendmmsg. A send made elsewhere into
 * an empty queue is tried at once, as a stream's write is.
 */
#ifndef TERN_UDP_P_H
#define TERN_UDP_P_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "loop_p.h"
#include "tern.h"

enum {
    TERN__U_RECEIVING = 1u << 0,  /* recv_start is in force */
    TERN__U_CONNECTED = 1u << 1,  /* tern_udp_connect fixed a peer */
    TERN__U_CLOSING = 1u << 2,    /* closed: the id is stale to callers */
    TERN__U_CLOSE_RAN = 1u << 3,  /* the close callback has run */
    TERN__U_DRAIN_OWED = 1u << 4, /* a send returned 1: drain_cb owed on low water */
    TERN__U_DISPATCH = 1u << 5,   /* inside the socket's dispatch: sends only queue */
    TERN__U_DRAIN_DUE = 1u << 6,  /* low water reached: drain_cb runs in the dispatch */
};

#define TERN__UDP_BUFS_MAX 64u
#define TERN__UDP_RECV_MAX 65536u

/* One tern_udp_send: its own copies of the address and the iovec array. */
struct tern__usend {
    struct tern__usend *next;
    tern_stream_cb cb; /* may be NULL */
    void *arg;
    int status;      /* set when it completes */
    socklen_t tolen; /* 0: the connected peer */
    struct sockaddr_storage to;
    size_t len;
    unsigned nbufs;
    struct iovec iov[];
};

struct tern__udp {
    struct tern__op op; /* first: the id, the class, the ready link */
    tern_loop *loop;
    unsigned state;
    int fd;
    int family;          /* AF_INET or AF_INET6 */
    struct tern__io io;  /* the fd's watcher; io.events is what it waits for now */
    unsigned io_revents; /* reported by the watcher since the last dispatch */

    /* receiving */
    tern_udp_recv_cb recv_cb;
    void *recv_arg;
    size_t recv_len;     /* bytes per datagram slot */
    unsigned char *rbuf; /* TERN_UDP_BATCH slots of recv_len bytes */
    size_t rbuf_slot;    /* the slot size rbuf was allocated for (0: none) */
    int recv_error;      /* receiving ended with this; told from dispatch (0: none) */
    /* receiving through the backend (TERN__DO_UDP_RECV): datagrams landed
     * in its buffers wait here, in order, linked through loop->landed */
    bool recv_on;                  /* the backend's receive is started */
    uint32_t land_head, land_tail; /* TERN__LANDED_NONE: none */
    int ring_error;                /* the receive ended with this; told after those landed */

    /* sending (udp_send.c) */
    struct tern__usend *sq, **sq_tail;     /* queued, in order */
    struct msghdr *ring_msgs;              /* TERN__DO_UDP_SEND: what the kernel's sends read */
    unsigned ring_sends;                   /* the queue's first ones are in the kernel */
    unsigned ring_kept;                    /* of those, completed unsent: sent again after */
    struct tern__usend *done, **done_tail; /* completed, callbacks owed */
    size_t queued;                         /* bytes queued, not yet sent */
    size_t queued_count;                   /* datagrams queued */
    size_t high_water;
    tern_drain_cb drain_cb;
    void *drain_arg;

    /* closing */
    tern_close_cb close_cb;
    void *close_arg;
};

/* The class of a UDP socket (udp.c: its dispatch, cancel and free hooks). */
extern const struct tern__op_class tern__udp_class;

/* udp_record.c */
/* The open socket named id, or NULL (unknown, stale, not UDP, closing). */
struct tern__udp *tern__udp_get(tern_loop *loop, tern_id id);
/* Queue the socket so its dispatch delivers what it owes. */
void tern__udp_owe(struct tern__udp *u);
/* The events the socket's state asks for (0: none); inline: every
 * readiness dispatch asks it. */
static inline unsigned tern__udp_wanted(const struct tern__udp *u)
{
    if (u->state & TERN__U_CLOSING)
        return 0;
    unsigned ev = 0;
    if ((u->state & TERN__U_RECEIVING) && !u->recv_on)
        ev |= TERN_READABLE;
    if (u->sq != NULL && u->ring_sends == 0)
        ev |= TERN_WRITABLE;
    return ev;
}
/* Watch the descriptor for exactly `events` (0 stops the watcher, which
 * never fails). 0, or -ENOMEM and the backend's errors. */
int tern__udp_watch(struct tern__udp *u, unsigned events);
/* Start or stop the backend's receive (TERN__DO_UDP_RECV) as the state
 * asks: wanted while receiving into sizes its buffers hold. 0, or why it
 * could not start (-ENOMEM, the backend's -EBUSY); a stop never fails. */
int tern__udp_recv_sync(struct tern__udp *u);
/* The length of a socket address of the socket's family, or 0. */
socklen_t tern__udp_addr_len(const struct tern__udp *u, const struct sockaddr *sa);

/* udp_send.c */
/* Watch for what the state asks (receiving, sends waiting for room); a
 * failure is told to the receive callback and fails the queued sends.
 * Here, beside the queue it fails. */
void tern__udp_rewatch(struct tern__udp *u);
/* Send what the kernel takes now; wait for room when it takes no more. */
void tern__udp_flush(struct tern__udp *u);
/* Complete every queued send with status, but those in the kernel, whose
 * completions complete them. */
void tern__udp_fail_all(struct tern__udp *u, int status);
/* Step 4: a datagram's send in the kernel completed (d->sent). */
void tern__udp_sent(struct tern__udp *u, const struct tern__done *d);
/* Step 2: run up to budget completed sends' callbacks, in order. */
void tern__udp_deliver(struct tern__udp *u, unsigned budget);

#endif
