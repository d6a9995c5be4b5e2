/*
 * The `rma` protocol's loops (NetPIPE's NPmpi2), with the contract of npmpi/protocols/rma/loops.py:
 * MPI_Put (or MPI_Get) of each message into (from) the peer's window at the region's displacement;
 * fences: an untimed opening fence, then per round trip "op, fence" by the side whose turn it is
 * and "fence" by the other, twice; lock: per message MPI_Win_lock(shared)/op/MPI_Win_unlock, then
 * the turn flag (MPI_Accumulate REPLACE of the message's number into the peer's flag window,
 * flushed), polled by the peer with MPI_Win_sync. The windows come from mpi4py's C API, made by the
 * link (npmpi/protocols/rma/link.py) before the clock starts.
 */
#include "cutil.h"

#include <stdint.h>

#if MPI_VERSION >= 4
#define NP_PUT MPI_Put_c
#define NP_GET MPI_Get_c
#else
#define NP_PUT MPI_Put
#define NP_GET MPI_Get
#endif

/* what a mode's iteration does, by its code (npmpi/core/modes.py's table): `turns`, the two sides
   take turns (ping-pong); `one_way`, only the transmitter operates and the target just synchronises
   (a stream); neither: both operate at once (bidir) */
static const struct rmode {
    int turns, one_way;
} RMODES[] = {[NP_MODE_PINGPONG] = {1, 0}, [NP_MODE_STREAM] = {0, 1}, [NP_MODE_BIDIR] = {0, 0}};

struct rplan {
    MPI_Comm comm;
    MPI_Win win, fwin;
    volatile int64_t *flag;
    int peer, get, mover, turns, one_way;
    char *local; /* the origin buffer: the send pool for a put, the receive pool for a get */
    np_count_t n;
    Py_ssize_t iters, per, regions, stride, reg;
};

#define CALL(call, name)                                                                                   \
    do {                                                                                                   \
        *rc = (call);                                                                                      \
        if (*rc != MPI_SUCCESS)                                                                            \
            return name;                                                                                   \
    } while (0)

/* one operation on region `reg`, then the next region */
static int rma_op(const struct rplan *p, Py_ssize_t *reg)
{
    char *o = p->local + *reg * p->stride;
    MPI_Aint disp = (MPI_Aint)(*reg * p->stride);
    *reg = *reg + 1 == p->regions ? 0 : *reg + 1;
    if (p->get)
        return NP_GET(o, p->n, MPI_BYTE, p->peer, disp, p->n, MPI_BYTE, p->win);
    return NP_PUT(o, p->n, MPI_BYTE, p->peer, disp, p->n, MPI_BYTE, p->win);
}

static const char *fence_loops(const struct rplan *p, double *elapsed, int *rc)
{
    const MPI_Win w = p->win;
    Py_ssize_t reg = p->reg;
    double t0, t1;
    CALL(MPI_Win_fence(0, w), "MPI_Win_fence");
    t0 = now_s();
    for (Py_ssize_t i = 0; i < p->iters; i++) {
        if (p->turns && !p->mover)
            CALL(MPI_Win_fence(0, w), "MPI_Win_fence");
        if (!p->one_way || p->mover)
            for (Py_ssize_t j = 0; j < p->per; j++)
                CALL(rma_op(p, &reg), p->get ? "MPI_Get" : "MPI_Put");
        CALL(MPI_Win_fence(0, w), "MPI_Win_fence");
        if (p->turns && p->mover)
            CALL(MPI_Win_fence(0, w), "MPI_Win_fence");
    }
    t1 = now_s();
    *elapsed = t1 - t0;
    return NULL;
}

static int notify(const struct rplan *p, int64_t k)
{
    int64_t seq = k;
    int rc = MPI_Accumulate(&seq, 1, MPI_INT64_T, p->peer, 0, 1, MPI_INT64_T, MPI_REPLACE, p->fwin);
    return rc == MPI_SUCCESS ? MPI_Win_flush(p->peer, p->fwin) : rc;
}

/* MPI_Win_sync: the memory barrier that makes the peer's accumulate visible; MPI_Iprobe: progress,
   which a one-sided implementation emulated over messages (Open MPI's osc/rdma over btl/tcp) needs
   at the target to apply the peer's operations */
static int wait_flag(const struct rplan *p, int64_t k)
{
    int rc = MPI_SUCCESS, any = 0;
    while (*p->flag < k && rc == MPI_SUCCESS) {
        rc = MPI_Win_sync(p->fwin);
        if (rc == MPI_SUCCESS && *p->flag < k)
            rc = MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, p->comm, &any, MPI_STATUS_IGNORE);
    }
    return rc;
}

static const char *lock_loops(const struct rplan *p, double *elapsed, int *rc)
{
    const MPI_Win w = p->win;
    const int peer = p->peer;
    Py_ssize_t reg = p->reg;
    double t0, t1;
    *p->flag = 0;
    CALL(MPI_Win_lock_all(0, p->fwin), "MPI_Win_lock_all");
    CALL(MPI_Barrier(p->comm), "MPI_Barrier");
    int origin = !p->one_way || p->mover; /* a stream's target only waits */
    int waits_first = p->turns && !p->mover;
    t0 = now_s();
    for (Py_ssize_t i = 1; i <= p->iters; i++) {
        if (waits_first)
            CALL(wait_flag(p, i), "MPI_Win_sync");
        if (origin) {
            CALL(MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, w), "MPI_Win_lock");
            for (Py_ssize_t j = 0; j < p->per; j++)
                CALL(rma_op(p, &reg), p->get ? "MPI_Get" : "MPI_Put");
            CALL(MPI_Win_unlock(peer, w), "MPI_Win_unlock");
            CALL(notify(p, i), "MPI_Accumulate");
        }
        if (!waits_first && !(p->one_way && p->mover))
            CALL(wait_flag(p, i), "MPI_Win_sync");
    }
    t1 = now_s();
    CALL(MPI_Win_unlock_all(p->fwin), "MPI_Win_unlock_all");
    *elapsed = t1 - t0;
    return NULL;
}

/* rma_transfer(comm, win, flag_win, flags, peer, sendbuf, recvbuf, nbytes, iterations, transmitter,
   mode, window, regions, stride, first, get, lock) -> elapsed seconds */
PyObject *np_rma_transfer(PyObject *self, PyObject *args)
{
    PyObject *comm_o, *win_o, *fwin_o, *flags_o, *send_o, *recv_o;
    const char *mode;
    int peer, transmitter, get, lock;
    Py_ssize_t nbytes, iters, window, regions, stride, first;
    if (!PyArg_ParseTuple(args, "OOOOiOOnnpsnnnnpp", &comm_o, &win_o, &fwin_o, &flags_o, &peer, &send_o,
                          &recv_o, &nbytes, &iters, &transmitter, &mode, &window, &regions, &stride, &first,
                          &get, &lock))
        return NULL;
    MPI_Comm *comm = np_comm(comm_o);
    MPI_Win *win = comm ? np_win(win_o) : NULL;
    MPI_Win *fwin = win ? np_win(fwin_o) : NULL;
    const int code = fwin ? np_mode_code("rma_transfer", mode, NP_MODES_ALL) : -1;
    if (code < 0)
        return NULL;
    const struct rmode *m = &RMODES[code];
    struct np_pool pool;
    /* the window is the messages one way per iteration, 1 outside a stream (npmpi/core/transfer.py) */
    if (nbytes < 0 || nbytes > NP_MAX_COUNT || iters < 0 || window < 1 || (!m->one_way && window != 1)) {
        PyErr_SetString(PyExc_ValueError, "rma_transfer: bad size, iterations or window");
        return NULL;
    }
    if (np_pool_plan(&pool, "rma_transfer", nbytes, window, regions, stride, first) < 0)
        return NULL;
    struct np_bufs b; /* the flag, the origin buffer */
    if (np_bufs_get(&b, flags_o, PyBUF_WRITABLE, get ? recv_o : send_o, get ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0 ||
        np_bufs_check(&b, 8, pool.extent, "rma_transfer") < 0)
        return NULL;
    const struct rplan p = {.comm = *comm, .win = *win, .fwin = *fwin, .flag = (volatile int64_t *)b.s.buf,
                            .peer = peer, .get = get, .mover = transmitter != get, .turns = m->turns,
                            .one_way = m->one_way, .local = b.r.buf, .n = (np_count_t)nbytes, .iters = iters,
                            .per = window, .regions = pool.regions, .stride = pool.stride, .reg = pool.reg};
    double elapsed = 0.0;
    int rc = MPI_SUCCESS;
    const char *failed;
    Py_BEGIN_ALLOW_THREADS
    failed = lock ? lock_loops(&p, &elapsed, &rc) : fence_loops(&p, &elapsed, &rc);
    Py_END_ALLOW_THREADS
    np_bufs_release(&b);
    if (failed != NULL)
        return np_mpi_error(rc, failed);
    return PyFloat_FromDouble(elapsed);
}
