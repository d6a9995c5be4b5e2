/*
 * The `memcpy` protocol's loops (NetPIPE's memcpy module): one process copying between two buffers,
 * with the contract of npmpi/protocols/memcpy/loops.py's memcpy_transfer. A ping-pong iteration copies the
 * message there and back (NetPIPE's SendData and RecvData), a stream iteration copies a window of
 * messages one way; message m uses region m % regions of both pools.
 *
 * The copies read and write memory Python owns, so the compiler may not drop them; the empty asm
 * with a "memory" clobber after each copy also keeps it from merging the copy back with the copy
 * there (which together leave the buffers as they were).
 */
#include "cutil.h"

#include <string.h>

#define KEEP(p) __asm__ __volatile__("" : : "r"(p) : "memory")

static double copy_loops(char *s, char *r, size_t n, Py_ssize_t iters, int stream, Py_ssize_t w,
                         Py_ssize_t regions, Py_ssize_t stride, Py_ssize_t reg)
{
    double t0, t1;
    if (stream) {
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iters; i++) {
            for (Py_ssize_t j = 0; j < w; j++) {
                memcpy(r + reg * stride, s + reg * stride, n);
                KEEP(r);
                reg = reg + 1 == regions ? 0 : reg + 1;
            }
        }
        t1 = now_s();
    } else if (regions == 1) {
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iters; i++) {
            memcpy(r, s, n);
            KEEP(r);
            memcpy(s, r, n);
            KEEP(s);
        }
        t1 = now_s();
    } else {
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iters; i++) {
            memcpy(r + reg * stride, s + reg * stride, n);
            KEEP(r);
            memcpy(s + reg * stride, r + reg * stride, n);
            KEEP(s);
            reg = reg + 1 == regions ? 0 : reg + 1;
        }
        t1 = now_s();
    }
    return t1 - t0;
}

PyObject *np_memcpy_transfer(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj;
    const char *mode;
    Py_ssize_t nbytes, iterations, window, regions, stride, first;
    if (!PyArg_ParseTuple(args, "OOnnsnnnn", &src_obj, &dst_obj, &nbytes, &iterations, &mode, &window,
                          &regions, &stride, &first))
        return NULL;
    const int code = np_mode_code("memcpy", mode, (1u << NP_MODE_PINGPONG) | (1u << NP_MODE_STREAM));
    if (code < 0)
        return NULL;
    const int stream = code == NP_MODE_STREAM;
    /* the window is the messages one way per iteration, 1 outside a stream (npmpi/core/transfer.py) */
    if (nbytes < 0 || iterations < 0 || window < 1 || (!stream && window != 1)) {
        PyErr_SetString(PyExc_ValueError, "negative size or iterations, no window, or a window outside a stream");
        return NULL;
    }
    struct np_pool pool;
    struct np_bufs b;
    if (np_pool_plan(&pool, "memcpy_transfer", nbytes, window, regions, stride, first) < 0 ||
        np_bufs_get(&b, src_obj, PyBUF_WRITABLE, dst_obj, PyBUF_WRITABLE) < 0 ||
        np_bufs_check(&b, pool.extent, pool.extent, "memcpy_transfer") < 0)
        return NULL;
    double elapsed;
    Py_BEGIN_ALLOW_THREADS
    elapsed = copy_loops(b.s.buf, b.r.buf, (size_t)nbytes, iterations, stream, window, regions, stride, pool.reg);
    Py_END_ALLOW_THREADS
    np_bufs_release(&b);
    return PyFloat_FromDouble(elapsed);
}
