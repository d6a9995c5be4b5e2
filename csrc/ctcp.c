/*
 * TCP sockets, the `tcp` protocol's loops (NetPIPE's NPtcp): blocking send/recv on the pair's
 * connected socket (its descriptor, set up by npmpi/protocols/tcp/link.py), with the contract of the
 * Python loops in npmpi/protocols/tcp/loops.py: the loop alone timed on CLOCK_MONOTONIC, a message
 * received whole (MSG_WAITALL, continued if the kernel returns early) into the receive pool's
 * region of that message, sends with MSG_NOSIGNAL (a closed peer is an error, not SIGPIPE).
 * bidir exchanges on a non-blocking socket with poll(): two blocking sends larger than the
 * socket buffers would wait for each other forever. Errors raise OSError (ECONNRESET when the
 * peer closed the connection), which the kernel's wrapper turns into LinkLost.
 */
#include "cutil.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

struct tplan {
    int fd, transmitter, mode;
    char *s, *r;
    Py_ssize_t n, iterations, window, regions, stride, reg; /* reg: region of the first message */
    Py_ssize_t extent;                                      /* the bytes each pool spans */
};

/* 0, or the errno of the failed send */
static int send_all(int fd, const char *buf, Py_ssize_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, buf, (size_t)n, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        buf += k;
        n -= k;
    }
    return 0;
}

/* 0, or the errno of the failed receive (ECONNRESET when the peer closed the connection) */
static int recv_all(int fd, char *buf, Py_ssize_t n)
{
    while (n > 0) {
        ssize_t k = recv(fd, buf, (size_t)n, MSG_WAITALL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (k == 0)
            return ECONNRESET;
        buf += k;
        n -= k;
    }
    return 0;
}

#define TNEXT(x) ((x) + 1 == p->regions ? 0 : (x) + 1)
#define TSB(x) (p->s + (x) * p->stride)
#define TRB(x) (p->r + (x) * p->stride)
#define TRY(call)                                                                                          \
    do {                                                                                                   \
        int e_ = (call);                                                                                   \
        if (e_ != 0)                                                                                       \
            return e_;                                                                                     \
    } while (0)

static int pingpong_loop(const struct tplan *p, double *elapsed)
{
    Py_ssize_t x = p->reg;
    double t0 = now_s();
    if (p->transmitter) {
        for (Py_ssize_t i = 0; i < p->iterations; i++, x = TNEXT(x)) {
            TRY(send_all(p->fd, TSB(x), p->n));
            TRY(recv_all(p->fd, TRB(x), p->n));
        }
    } else {
        for (Py_ssize_t i = 0; i < p->iterations; i++, x = TNEXT(x)) {
            TRY(recv_all(p->fd, TRB(x), p->n));
            TRY(send_all(p->fd, TSB(x), p->n));
        }
    }
    *elapsed = now_s() - t0;
    return 0;
}

static int stream_loop(const struct tplan *p, double *elapsed)
{
    Py_ssize_t x = p->reg;
    char ack = 0;
    double t0 = now_s();
    if (p->transmitter) {
        for (Py_ssize_t i = 0; i < p->iterations; i++) {
            for (Py_ssize_t j = 0; j < p->window; j++, x = TNEXT(x))
                TRY(send_all(p->fd, TSB(x), p->n));
            TRY(recv_all(p->fd, &ack, 1));
        }
    } else {
        for (Py_ssize_t i = 0; i < p->iterations; i++) {
            for (Py_ssize_t j = 0; j < p->window; j++, x = TNEXT(x))
                TRY(recv_all(p->fd, TRB(x), p->n));
            TRY(send_all(p->fd, &ack, 1));
        }
    }
    *elapsed = now_s() - t0;
    return 0;
}

/* Send s and receive r at once on a non-blocking socket; 0 or an errno. */
static int exchange(int fd, const char *s, char *r, Py_ssize_t n)
{
    Py_ssize_t sent = 0, got = 0;
    while (sent < n || got < n) {
        int moved = 0;
        if (sent < n) {
            ssize_t k = send(fd, s + sent, (size_t)(n - sent), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0) {
                sent += k;
                moved = 1;
            } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return errno;
        }
        if (got < n) {
            ssize_t k = recv(fd, r + got, (size_t)(n - got), MSG_DONTWAIT);
            if (k == 0)
                return ECONNRESET;
            if (k > 0) {
                got += k;
                moved = 1;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return errno;
        }
        if (!moved) {
            struct pollfd pfd = {fd, (short)((sent < n ? POLLOUT : 0) | (got < n ? POLLIN : 0)), 0};
            if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
                return errno;
        }
    }
    return 0;
}

static int bidir_loop(const struct tplan *p, double *elapsed)
{
    Py_ssize_t x = p->reg;
    double t0 = now_s();
    for (Py_ssize_t i = 0; i < p->iterations; i++, x = TNEXT(x))
        TRY(exchange(p->fd, TSB(x), TRB(x), p->n));
    *elapsed = now_s() - t0;
    return 0;
}

static int run_plan(const struct tplan *p, double *elapsed)
{
    *elapsed = 0.0;
    if (p->iterations <= 0)
        return 0;
    switch (p->mode) {
    case NP_MODE_STREAM:
        return stream_loop(p, elapsed);
    case NP_MODE_BIDIR:
        return bidir_loop(p, elapsed);
    default:
        return pingpong_loop(p, elapsed);
    }
}

/* Run a checked plan on the caller's pools with the GIL released; the elapsed seconds or OSError. */
static PyObject *run_on(struct tplan *p, PyObject *send_obj, PyObject *recv_obj, const char *what)
{
    struct np_bufs b;
    if (np_bufs_get(&b, send_obj, PyBUF_SIMPLE, recv_obj, PyBUF_WRITABLE) < 0 ||
        np_bufs_check(&b, p->extent, p->extent, what) < 0)
        return NULL;
    p->s = b.s.buf;
    p->r = b.r.buf;
    double elapsed = 0.0;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = run_plan(p, &elapsed);
    Py_END_ALLOW_THREADS
    np_bufs_release(&b);
    if (err != 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyFloat_FromDouble(elapsed);
}

PyObject *np_tcp_pingpong(PyObject *self, PyObject *args)
{
    PyObject *send_obj, *recv_obj;
    struct tplan p = {0};
    if (!PyArg_ParseTuple(args, "iOOnnp", &p.fd, &send_obj, &recv_obj, &p.n, &p.iterations, &p.transmitter))
        return NULL;
    if (p.fd < 0 || p.n < 0 || p.iterations < 0) {
        PyErr_SetString(PyExc_ValueError, "bad descriptor, message size or iterations");
        return NULL;
    }
    p.mode = NP_MODE_PINGPONG;
    p.window = p.regions = 1;
    p.extent = p.n;
    return run_on(&p, send_obj, recv_obj, "tcp_pingpong");
}

PyObject *np_tcp_transfer(PyObject *self, PyObject *args)
{
    PyObject *send_obj, *recv_obj;
    const char *mode;
    Py_ssize_t regions, stride, first;
    struct tplan p = {0};
    if (!PyArg_ParseTuple(args, "iOOnnpsnnnn", &p.fd, &send_obj, &recv_obj, &p.n, &p.iterations, &p.transmitter,
                          &mode, &p.window, &regions, &stride, &first))
        return NULL;
    p.mode = np_mode_code("tcp_transfer", mode, NP_MODES_ALL);
    if (p.mode < 0)
        return NULL;
    /* the window is the messages one way per iteration, 1 outside a stream (npmpi/core/transfer.py) */
    if (p.fd < 0 || p.n < 0 || p.iterations < 0 || p.window < 1 || (p.mode != NP_MODE_STREAM && p.window != 1)) {
        PyErr_SetString(PyExc_ValueError, "bad descriptor, size, iterations or window");
        return NULL;
    }
    struct np_pool pool;
    if (np_pool_plan(&pool, "tcp_transfer", p.n, p.window, regions, stride, first) < 0)
        return NULL;
    p.regions = pool.regions;
    p.stride = pool.stride;
    p.extent = pool.extent;
    p.reg = pool.reg; /* message first (pingpong, bidir) or first * window (stream) */
    return run_on(&p, send_obj, recv_obj, "tcp_transfer");
}
