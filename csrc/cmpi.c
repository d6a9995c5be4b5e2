/*
 * MPI two-sided send/receive, the `mpi` protocol's loops: blocking MPI_Send/MPI_Recv of `nbytes`
 * bytes per message; `transfer` holds the other modes (stream, bidir), pre-posted receives and
 * cache-cold buffer pools, one loop per variant. The communicator comes from mpi4py through its C
 * API, so both kernels use one MPI library. With an MPI 4 library, counts go through the
 * large-count `_c` functions, so messages may exceed 2 GiB - 1 bytes.
 */
#include "cutil.h"

#include <stdlib.h>

/* The message size as a count of MPI_BYTE; -1 with an OverflowError past the library's counts. */
static int check_count(Py_ssize_t nbytes)
{
    if (nbytes >= 0 && nbytes <= NP_MAX_COUNT)
        return 0;
    PyErr_Format(PyExc_OverflowError, "message size %zd bytes is outside 0..%zd", nbytes, NP_MAX_COUNT);
    return -1;
}

PyObject *np_mpi_pingpong(PyObject *self, PyObject *args)
{
    PyObject *comm_obj, *send_obj, *recv_obj;
    int peer, transmitter;
    Py_ssize_t nbytes, iterations;
    if (!PyArg_ParseTuple(args, "OiOOnnp", &comm_obj, &peer, &send_obj, &recv_obj, &nbytes,
                          &iterations, &transmitter))
        return NULL;
    MPI_Comm *comm = np_comm(comm_obj);
    if (comm == NULL || check_count(nbytes) < 0)
        return NULL;
    if (iterations < 0) {
        PyErr_SetString(PyExc_ValueError, "iterations must not be negative");
        return NULL;
    }
    struct np_bufs b;
    if (np_bufs_get(&b, send_obj, PyBUF_SIMPLE, recv_obj, PyBUF_WRITABLE) < 0 ||
        np_bufs_check(&b, nbytes, nbytes, "pingpong") < 0)
        return NULL;
    const np_count_t count = (np_count_t)nbytes;
    void *s = b.s.buf, *r = b.r.buf;
    MPI_Comm c = *comm;
    int rc = MPI_SUCCESS;
    const char *failed = NULL;
    double t0, t1;

    Py_BEGIN_ALLOW_THREADS
    if (transmitter) {
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iterations; i++) {
            rc = NP_SEND(s, count, MPI_BYTE, peer, DATA_TAG, c);
            if (rc != MPI_SUCCESS) { failed = "MPI_Send"; break; }
            rc = NP_RECV(r, count, MPI_BYTE, peer, DATA_TAG, c, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) { failed = "MPI_Recv"; break; }
        }
        t1 = now_s();
    } else {
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iterations; i++) {
            rc = NP_RECV(r, count, MPI_BYTE, peer, DATA_TAG, c, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) { failed = "MPI_Recv"; break; }
            rc = NP_SEND(s, count, MPI_BYTE, peer, DATA_TAG, c);
            if (rc != MPI_SUCCESS) { failed = "MPI_Send"; break; }
        }
        t1 = now_s();
    }
    Py_END_ALLOW_THREADS

    np_bufs_release(&b);
    if (failed != NULL)
        return np_mpi_error(rc, failed);
    return PyFloat_FromDouble(t1 - t0);
}

enum { MODE_PINGPONG = NP_MODE_PINGPONG, MODE_STREAM = NP_MODE_STREAM, MODE_BIDIR = NP_MODE_BIDIR };

struct plan {
    MPI_Comm comm;
    int peer, transmitter, mode, async;
    char *s, *r;
    np_count_t count;
    Py_ssize_t iterations, window, regions, stride, reg; /* reg: region of the first message */
    Py_ssize_t extent;                                /* the bytes each pool spans */
    MPI_Request *reqs;                                /* window requests (stream, windowed bidir) */
};

#define NEXT(x) ((x) + 1 == p->regions ? 0 : (x) + 1)
#define SB(x) (p->s + (x) * p->stride)
#define RB(x) (p->r + (x) * p->stride)
#define CALL(call, name)                                                                                   \
    do {                                                                                                   \
        *rc = (call);                                                                                      \
        if (*rc != MPI_SUCCESS)                                                                            \
            return name;                                                                                   \
    } while (0)

/* Ping-pong through the pools' regions: the four variants' timed loops (NULL on success, else
   the failed call's name). */
static const char *pingpong_loops(const struct plan *p, double *elapsed, int *rc)
{
    const MPI_Comm c = p->comm;
    const int peer = p->peer, tag = DATA_TAG;
    const np_count_t n = p->count;
    const Py_ssize_t iters = p->iterations;
    Py_ssize_t reg = p->reg;
    double t0 = 0.0, t1 = 0.0;
    Py_ssize_t nreg;
    MPI_Request q = MPI_REQUEST_NULL;
    switch (p->transmitter * 2 + p->async) {
    /* ping-pong: one message there, one back */
    case 2: /* transmitter */
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iters; i++) {
            CALL(NP_SEND(SB(reg), n, MPI_BYTE, peer, tag, c), "MPI_Send");
            CALL(NP_RECV(RB(reg), n, MPI_BYTE, peer, tag, c, MPI_STATUS_IGNORE), "MPI_Recv");
            reg = NEXT(reg);
        }
        t1 = now_s();
        break;
    case 3: /* transmitter, --async */
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iters; i++) {
            CALL(NP_IRECV(RB(reg), n, MPI_BYTE, peer, tag, c, &q), "MPI_Irecv");
            CALL(NP_SEND(SB(reg), n, MPI_BYTE, peer, tag, c), "MPI_Send");
            CALL(MPI_Wait(&q, MPI_STATUS_IGNORE), "MPI_Wait");
            reg = NEXT(reg);
        }
        t1 = now_s();
        break;
    case 0: /* reflector */
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iters; i++) {
            CALL(NP_RECV(RB(reg), n, MPI_BYTE, peer, tag, c, MPI_STATUS_IGNORE), "MPI_Recv");
            CALL(NP_SEND(SB(reg), n, MPI_BYTE, peer, tag, c), "MPI_Send");
            reg = NEXT(reg);
        }
        t1 = now_s();
        break;
    case 1: /* reflector, --async: the next receive is posted before replying */
        CALL(NP_IRECV(RB(reg), n, MPI_BYTE, peer, tag, c, &q), "MPI_Irecv");
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iters - 1; i++) {
            CALL(MPI_Wait(&q, MPI_STATUS_IGNORE), "MPI_Wait");
            nreg = NEXT(reg);
            CALL(NP_IRECV(RB(nreg), n, MPI_BYTE, peer, tag, c, &q), "MPI_Irecv");
            CALL(NP_SEND(SB(reg), n, MPI_BYTE, peer, tag, c), "MPI_Send");
            reg = nreg;
        }
        CALL(MPI_Wait(&q, MPI_STATUS_IGNORE), "MPI_Wait");
        CALL(NP_SEND(SB(reg), n, MPI_BYTE, peer, tag, c), "MPI_Send");
        t1 = now_s();
        break;
    default:
        return "mode";
    }
    *elapsed = t1 - t0;
    return NULL;
}

/* Bidir: both sides post the receive, send and wait; with --async the next receive is posted
   as soon as one completes. */
static const char *bidir_loops(const struct plan *p, double *elapsed, int *rc)
{
    const MPI_Comm c = p->comm;
    const int peer = p->peer, tag = DATA_TAG;
    const np_count_t n = p->count;
    const Py_ssize_t iters = p->iterations;
    Py_ssize_t reg = p->reg;
    double t0 = 0.0, t1 = 0.0;
    MPI_Request q = MPI_REQUEST_NULL;
    switch (p->transmitter * 2 + p->async) {
    /* bidir: both sides post the receive, send, wait */
    case 2:
    case 0:
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iters; i++) {
            CALL(NP_IRECV(RB(reg), n, MPI_BYTE, peer, tag, c, &q), "MPI_Irecv");
            CALL(NP_SEND(SB(reg), n, MPI_BYTE, peer, tag, c), "MPI_Send");
            CALL(MPI_Wait(&q, MPI_STATUS_IGNORE), "MPI_Wait");
            reg = NEXT(reg);
        }
        t1 = now_s();
        break;
    case 3:
    case 1: /* --async: the next receive is posted as soon as one completes */
        CALL(NP_IRECV(RB(reg), n, MPI_BYTE, peer, tag, c, &q), "MPI_Irecv");
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iters - 1; i++) {
            CALL(NP_SEND(SB(reg), n, MPI_BYTE, peer, tag, c), "MPI_Send");
            CALL(MPI_Wait(&q, MPI_STATUS_IGNORE), "MPI_Wait");
            reg = NEXT(reg);
            CALL(NP_IRECV(RB(reg), n, MPI_BYTE, peer, tag, c, &q), "MPI_Irecv");
        }
        CALL(NP_SEND(SB(reg), n, MPI_BYTE, peer, tag, c), "MPI_Send");
        CALL(MPI_Wait(&q, MPI_STATUS_IGNORE), "MPI_Wait");
        t1 = now_s();
        break;
    default:
        return "mode";
    }
    *elapsed = t1 - t0;
    return NULL;
}

/* Bidir with a window each way (osu_bibw): both sides post the window's receives, then its sends,
   then wait for the sends and the receives (no --async: refused by the options). */
static const char *bidir_window_loop(const struct plan *p, double *elapsed, int *rc)
{
    const MPI_Comm c = p->comm;
    const int peer = p->peer, tag = DATA_TAG;
    const np_count_t n = p->count;
    const Py_ssize_t iters = p->iterations, w = p->window;
    MPI_Request *rq = p->reqs, *sq = p->reqs + w;
    Py_ssize_t reg = p->reg, at;
    const double t0 = now_s();
    for (Py_ssize_t i = 0; i < iters; i++) {
        at = reg;
        for (Py_ssize_t j = 0; j < w; j++) {
            CALL(NP_IRECV(RB(at), n, MPI_BYTE, peer, tag, c, &rq[j]), "MPI_Irecv");
            at = NEXT(at);
        }
        for (Py_ssize_t j = 0; j < w; j++) {
            CALL(NP_ISEND(SB(reg), n, MPI_BYTE, peer, tag, c, &sq[j]), "MPI_Isend");
            reg = NEXT(reg);
        }
        CALL(MPI_Waitall((int)w, sq, MPI_STATUSES_IGNORE), "MPI_Waitall");
        CALL(MPI_Waitall((int)w, rq, MPI_STATUSES_IGNORE), "MPI_Waitall");
    }
    *elapsed = now_s() - t0;
    return NULL;
}

/* Stream: a window of Isends, then a 1-byte acknowledgement; with --async the receiver posts
   the next window before acknowledging. */
static const char *stream_loops(const struct plan *p, double *elapsed, int *rc)
{
    const MPI_Comm c = p->comm;
    const int peer = p->peer, tag = DATA_TAG;
    const np_count_t n = p->count;
    const Py_ssize_t iters = p->iterations;
    Py_ssize_t reg = p->reg;
    double t0 = 0.0, t1 = 0.0;
    const Py_ssize_t w = p->window;
    MPI_Request q = MPI_REQUEST_NULL;
    MPI_Request *reqs = p->reqs;
    char ack = 0;
    switch (p->transmitter * 2 + p->async) {
    /* stream: a window of Isends, then a 1-byte acknowledgement */
    case 2:
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iters; i++) {
            for (Py_ssize_t j = 0; j < w; j++) {
                CALL(NP_ISEND(SB(reg), n, MPI_BYTE, peer, tag, c, &reqs[j]), "MPI_Isend");
                reg = NEXT(reg);
            }
            CALL(MPI_Waitall((int)w, reqs, MPI_STATUSES_IGNORE), "MPI_Waitall");
            CALL(MPI_Recv(&ack, 1, MPI_BYTE, peer, ACK_TAG, c, MPI_STATUS_IGNORE), "MPI_Recv");
        }
        t1 = now_s();
        break;
    case 3:
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iters; i++) {
            CALL(MPI_Irecv(&ack, 1, MPI_BYTE, peer, ACK_TAG, c, &q), "MPI_Irecv");
            for (Py_ssize_t j = 0; j < w; j++) {
                CALL(NP_ISEND(SB(reg), n, MPI_BYTE, peer, tag, c, &reqs[j]), "MPI_Isend");
                reg = NEXT(reg);
            }
            CALL(MPI_Waitall((int)w, reqs, MPI_STATUSES_IGNORE), "MPI_Waitall");
            CALL(MPI_Wait(&q, MPI_STATUS_IGNORE), "MPI_Wait");
        }
        t1 = now_s();
        break;
    case 0:
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iters; i++) {
            for (Py_ssize_t j = 0; j < w; j++) {
                CALL(NP_IRECV(RB(reg), n, MPI_BYTE, peer, tag, c, &reqs[j]), "MPI_Irecv");
                reg = NEXT(reg);
            }
            CALL(MPI_Waitall((int)w, reqs, MPI_STATUSES_IGNORE), "MPI_Waitall");
            CALL(MPI_Send(&ack, 1, MPI_BYTE, peer, ACK_TAG, c), "MPI_Send");
        }
        t1 = now_s();
        break;
    case 1: /* --async: the next window is posted before the acknowledgement */
        for (Py_ssize_t j = 0; j < w; j++) {
            CALL(NP_IRECV(RB(reg), n, MPI_BYTE, peer, tag, c, &reqs[j]), "MPI_Irecv");
            reg = NEXT(reg);
        }
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iters - 1; i++) {
            CALL(MPI_Waitall((int)w, reqs, MPI_STATUSES_IGNORE), "MPI_Waitall");
            for (Py_ssize_t j = 0; j < w; j++) {
                CALL(NP_IRECV(RB(reg), n, MPI_BYTE, peer, tag, c, &reqs[j]), "MPI_Irecv");
                reg = NEXT(reg);
            }
            CALL(MPI_Send(&ack, 1, MPI_BYTE, peer, ACK_TAG, c), "MPI_Send");
        }
        CALL(MPI_Waitall((int)w, reqs, MPI_STATUSES_IGNORE), "MPI_Waitall");
        CALL(MPI_Send(&ack, 1, MPI_BYTE, peer, ACK_TAG, c), "MPI_Send");
        t1 = now_s();
        break;
    default:
        return "mode";
    }
    *elapsed = t1 - t0;
    return NULL;
}

/* The timed loops of every variant; returns the failed call's name (NULL on success). */
static const char *transfer_loops(const struct plan *p, double *elapsed, int *rc)
{
    *elapsed = 0.0;
    if (p->iterations <= 0)
        return NULL;
    switch (p->mode) {
    case MODE_PINGPONG:
        return pingpong_loops(p, elapsed, rc);
    case MODE_BIDIR:
        return p->window > 1 ? bidir_window_loop(p, elapsed, rc) : bidir_loops(p, elapsed, rc);
    case MODE_STREAM:
        return stream_loops(p, elapsed, rc);
    default:
        return "mode";
    }
}

/* The plan of a transfer call from its arguments, checked; -1 with a Python error set. */
static int make_plan(struct plan *p, const char *mode, Py_ssize_t nbytes, Py_ssize_t iterations, Py_ssize_t window,
                     Py_ssize_t regions, Py_ssize_t stride, Py_ssize_t first)
{
    p->mode = np_mode_code("transfer", mode, NP_MODES_ALL);
    if (p->mode < 0 || check_count(nbytes) < 0)
        return -1;
    /* the window is the messages one way per iteration, 1 in a ping-pong (npmpi/core/transfer.py,
       which also refuses --async with a windowed bidir: its loop has no pre-posted variant) */
    if (iterations < 0 || window < 1 || window > INT_MAX / 2 || (p->mode == MODE_PINGPONG && window != 1)) {
        PyErr_SetString(PyExc_ValueError, "bad iterations or window");
        return -1;
    }
    struct np_pool pool;
    if (np_pool_plan(&pool, "transfer", nbytes, window, regions, stride, first) < 0)
        return -1;
    p->count = (np_count_t)nbytes;
    p->iterations = iterations;
    p->window = window;
    p->regions = pool.regions;
    p->stride = pool.stride;
    p->extent = pool.extent;
    p->reg = pool.reg; /* message first * window (window 1 in a ping-pong and a plain bidir) */
    return 0;
}

PyObject *np_mpi_transfer(PyObject *self, PyObject *args)
{
    PyObject *comm_obj, *send_obj, *recv_obj;
    const char *mode;
    int peer, transmitter, async;
    Py_ssize_t nbytes, iterations, window, regions, stride, first;
    if (!PyArg_ParseTuple(args, "OiOOnnpsnpnnn", &comm_obj, &peer, &send_obj, &recv_obj, &nbytes,
                          &iterations, &transmitter, &mode, &window, &async, &regions, &stride, &first))
        return NULL;
    MPI_Comm *comm = np_comm(comm_obj);
    if (comm == NULL)
        return NULL;
    struct plan p = {0};
    if (make_plan(&p, mode, nbytes, iterations, window, regions, stride, first) < 0)
        return NULL;
    struct np_bufs b;
    if (np_bufs_get(&b, send_obj, PyBUF_SIMPLE, recv_obj, PyBUF_WRITABLE) < 0 ||
        np_bufs_check(&b, p.extent, p.extent, "transfer") < 0)
        return NULL;
    if (p.window > 1 || p.mode == MODE_STREAM) { /* a window's requests; a bidir's both ways */
        p.reqs = malloc(sizeof(MPI_Request) * (size_t)p.window * 2);
        if (p.reqs == NULL) {
            np_bufs_release(&b);
            return PyErr_NoMemory();
        }
    }
    p.comm = *comm;
    p.peer = peer;
    p.transmitter = transmitter ? 1 : 0;
    p.async = async ? 1 : 0;
    p.s = b.s.buf;
    p.r = b.r.buf;
    double elapsed = 0.0;
    int rc = MPI_SUCCESS;
    const char *failed;

    Py_BEGIN_ALLOW_THREADS
    failed = transfer_loops(&p, &elapsed, &rc);
    Py_END_ALLOW_THREADS

    free(p.reqs);
    np_bufs_release(&b);
    if (failed != NULL)
        return np_mpi_error(rc, failed);
    return PyFloat_FromDouble(elapsed);
}
