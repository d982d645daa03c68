/*
 * Name lookups (tern_resolve) and reverse lookups (tern_resolve_addr): a
 * job of kind TERN__WORK_LOOKUP whose work is getaddrinfo or getnameinfo.
 * The pool runs it on the bounded class under the lookup cap
 * (pool/lookup.c); this file is the loop's half: the request, its done,
 * and the early answer when a deadline passes mid-lookup. Both directions
 * share the record, so a reverse lookup is cancelled, timed out and
 * counted exactly as a forward one.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "admit.h"
#include "container.h"
#include "job_p.h"
#include "testing.h"

struct lookup {
    /*
     * A deadline that passes while getaddrinfo runs cannot interrupt it,
     * so the caller is answered at once (-ETIMEDOUT, in step 2, through
     * this op) and the late result is dropped when the worker returns.
     */
    struct tern__op answer;
    bool answered; /* the callback has been given, or is queued */
    unsigned refs; /* the job, and the queued answer */
    tern_id id;
    /* Forward: the names asked for. Reverse: the buffers the answer is
     * written into (NI_MAXHOST and NI_MAXSERV bytes). */
    char *host, *service;
    struct addrinfo hints;
    bool has_hints;
    int gai_status;
    tern_resolve_cb cb;
    void *arg;
    /* reverse only (cb is NULL) */
    tern_nameinfo_cb name_cb;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int ni_flags;
};

/* Room getnameinfo may fill: the system's limits where it states them. */
#ifdef NI_MAXHOST
#define NAME_HOST_MAX NI_MAXHOST
#else
#define NAME_HOST_MAX 1025
#endif
#ifdef NI_MAXSERV
#define NAME_SERV_MAX NI_MAXSERV
#else
#define NAME_SERV_MAX 32
#endif

/* The lookup tern_resolve calls: getaddrinfo unless a test replaced it
 * (runtime/loop/seams.c, built only into the tests' library). */
_Atomic(tern__getaddrinfo_fn) tern__resolve_getaddrinfo;
/* The same for tern_resolve_addr: getnameinfo unless a test replaced it. */
_Atomic(tern__getnameinfo_fn) tern__resolve_getnameinfo;

static int map_gai(int rc)
{
    switch (rc) {
    case 0:
        return 0;
    case EAI_NONAME:
        return TERN_EAI_NONAME;
    case EAI_AGAIN:
        return TERN_EAI_AGAIN;
    case EAI_FAIL:
        return TERN_EAI_FAIL;
    case EAI_FAMILY:
        return TERN_EAI_FAMILY;
    case EAI_SERVICE:
        return TERN_EAI_SERVICE;
#ifdef EAI_NODATA
    case EAI_NODATA:
        return TERN_EAI_NODATA;
#endif
    case EAI_MEMORY:
        return -ENOMEM;
    /* errno 0 would read as success: a system error that names no cause. */
    case EAI_SYSTEM:
        return errno != 0 ? -errno : TERN_EAI_OTHER;
    default:
        return TERN_EAI_OTHER;
    }
}

static void *reverse_work(struct lookup *l)
{
    tern__getnameinfo_fn fn = atomic_load(&tern__resolve_getnameinfo);
    errno = 0;
    int rc = fn ? fn((struct sockaddr *)&l->addr, l->addrlen, l->host, NAME_HOST_MAX, l->service,
                     NAME_SERV_MAX, l->ni_flags)
                : getnameinfo((struct sockaddr *)&l->addr, l->addrlen, l->host, NAME_HOST_MAX,
                              l->service, NAME_SERV_MAX, l->ni_flags);
    l->gai_status = map_gai(rc);
    return NULL;
}

static void *lookup_work(tern_job *job, void *arg)
{
    (void)job;
    struct lookup *l = arg;
    if (l->cb == NULL)
        return reverse_work(l);
    struct addrinfo *res = NULL;
    tern__getaddrinfo_fn fn = atomic_load(&tern__resolve_getaddrinfo);
    errno = 0; /* EAI_SYSTEM reads it: never a stale value */
    int rc = fn ? fn(l->host, l->service, l->has_hints ? &l->hints : NULL, &res)
                : getaddrinfo(l->host, l->service, l->has_hints ? &l->hints : NULL, &res);
    l->gai_status = map_gai(rc);
    return rc == 0 ? res : NULL;
}

static void free_lookup(struct lookup *l)
{
    free(l->host);
    free(l->service);
    free(l);
}

static void lookup_unref(struct lookup *l)
{
    TERN_DECREMENT(l->refs);
    if (l->refs == 0)
        free_lookup(l);
}

static void answer_dispatch(tern_loop *loop, struct tern__op *op)
{
    struct lookup *l = tern__container_of(op, struct lookup, answer);
    tern_resolve_cb cb = l->cb;
    void *cb_arg = l->arg;
    tern_nameinfo_cb name_cb = l->name_cb;
    tern_id id = l->id;
    tern__op_finish(loop, op); /* may free l: the job's done has come */
    if (cb != NULL)
        cb(loop, id, -ETIMEDOUT, NULL, cb_arg);
    else
        name_cb(loop, id, -ETIMEDOUT, NULL, NULL, cb_arg);
}

static int answer_cancel(tern_loop *loop, struct tern__op *op)
{
    (void)loop, (void)op;
    return TERN_CANCEL_STOPPED; /* queued to run; teardown's drain delivers it */
}

static void answer_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    lookup_unref(tern__container_of(op, struct lookup, answer));
}

static const struct tern__op_class answer_class = {
    .name = "lookup timeout",
    .dispatch = answer_dispatch,
    .cancel = answer_cancel,
    .free = answer_free,
    .refable = false,
};

void tern__lookup_expired(tern_loop *loop, tern_job *job)
{
    struct lookup *l = job->work.arg;
    if (l->answered || tern__op_admit(loop) < 0)
        return; /* no room for the early answer: the job's done gives it, late */
    l->answered = true;
    l->refs++;
    l->id = job->op.id;
    tern__op_add_anon(loop, &l->answer, &answer_class);
    tern__op_ready(loop, &l->answer);
}

static void lookup_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    struct lookup *l = arg;
    struct addrinfo *res = result;
    if (l->answered) {
        tern_freeaddrinfo(res); /* the caller was told -ETIMEDOUT already */
        lookup_unref(l);
        return;
    }
    if (status == 0)
        status = l->gai_status;
    if (l->cb == NULL) {
        /* The answer lives in l: free it only once the callback is done. */
        l->name_cb(loop, id, status, status == 0 ? l->host : NULL, status == 0 ? l->service : NULL,
                   l->arg);
        lookup_unref(l);
        return;
    }
    if (status != 0 && res != NULL) {
        freeaddrinfo(res);
        res = NULL;
    }
    tern_resolve_cb cb = l->cb;
    void *cb_arg = l->arg;
    lookup_unref(l);
    cb(loop, id, status, res, cb_arg);
}

void tern_freeaddrinfo(struct addrinfo *res)
{
    if (res != NULL)
        freeaddrinfo(res);
}

static char *dup_or_null(const char *s, bool *failed)
{
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = tern__malloc(n);
    if (d == NULL)
        *failed = true;
    else
        memcpy(d, s, n);
    return d;
}

static int lookup_submit(tern_loop *loop, const char *host, const char *service,
                         const struct addrinfo *hints, tern_resolve_cb cb, void *arg,
                         const tern_job_options *opts, tern_id *idp, tern_job **jobp)
{
    if (host == NULL && service == NULL)
        return -EINVAL;
    if (tern__loop_closing(loop))
        return -ESHUTDOWN;
    struct lookup *l = tern__calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    bool failed = false;
    l->host = dup_or_null(host, &failed);
    l->service = dup_or_null(service, &failed);
    if (failed) {
        free_lookup(l);
        return -ENOMEM;
    }
    if (hints != NULL) {
        /* Only the selecting fields of hints mean anything to getaddrinfo. */
        l->hints = (struct addrinfo){.ai_flags = hints->ai_flags,
                                     .ai_family = hints->ai_family,
                                     .ai_socktype = hints->ai_socktype,
                                     .ai_protocol = hints->ai_protocol};
        l->has_hints = true;
    }
    l->cb = cb;
    l->arg = arg;
    l->refs = 1;
    int rc = tern__submit_job_with(loop, TERN_BOUNDED, TERN__WORK_LOOKUP, lookup_work, lookup_done,
                                   l, opts, idp, jobp);
    if (rc < 0)
        free_lookup(l);
    return rc;
}

int tern_resolve_with(tern_loop *loop, const char *host, const char *service,
                      const struct addrinfo *hints, tern_resolve_cb cb, void *arg,
                      const tern_job_options *opts, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    loop->last_refusal = TERN_REFUSED_NONE; /* whatever this call returns, it is its own */
    if (cb == NULL)
        return -EINVAL;
    return lookup_submit(loop, host, service, hints, cb, arg, opts, idp, NULL);
}

int tern_resolve(tern_loop *loop, const char *host, const char *service,
                 const struct addrinfo *hints, tern_resolve_cb cb, void *arg, tern_id *idp)
{
    return tern_resolve_with(loop, host, service, hints, cb, arg, NULL, idp);
}

int tern_resolve_addr(tern_loop *loop, const struct sockaddr *addr, int flags, tern_nameinfo_cb cb,
                      void *arg, const tern_job_options *opts, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    loop->last_refusal = TERN_REFUSED_NONE;
    if (cb == NULL || addr == NULL)
        return -EINVAL;
    /* The family says how long the address is, as for tern_udp_send. */
    socklen_t addrlen;
    if (addr->sa_family == AF_INET)
        addrlen = sizeof(struct sockaddr_in);
    else if (addr->sa_family == AF_INET6)
        addrlen = sizeof(struct sockaddr_in6);
    else
        return -EAFNOSUPPORT;
    if (tern__loop_closing(loop))
        return -ESHUTDOWN;
    struct lookup *l = tern__calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    l->host = tern__malloc(NAME_HOST_MAX);
    l->service = tern__malloc(NAME_SERV_MAX);
    if (l->host == NULL || l->service == NULL) {
        free_lookup(l);
        return -ENOMEM;
    }
    memcpy(&l->addr, addr, addrlen);
    l->addrlen = addrlen;
    l->ni_flags = flags;
    l->name_cb = cb;
    l->arg = arg;
    l->refs = 1;
    int rc = tern__submit_job_with(loop, TERN_BOUNDED, TERN__WORK_LOOKUP, lookup_work, lookup_done,
                                   l, opts, idp, NULL);
    if (rc < 0)
        free_lookup(l);
    return rc;
}

/*
 * The runtime's own lookups (a connect's): the job is submitted as any
 * lookup's but anonymous, never in the id map, so only the pointer handed
 * back reaches it. It stays a live op until its done has run.
 */
int tern__lookup_start(tern_loop *loop, const char *host, const char *service,
                       const struct addrinfo *hints, tern_resolve_cb cb, void *arg, tern_job **jobp)
{
    return lookup_submit(loop, host, service, hints, cb, arg, NULL, NULL, jobp);
}

void tern__lookup_cancel(tern_loop *loop, tern_job *job)
{
    (void)job->op.cls->cancel(loop, &job->op);
}
