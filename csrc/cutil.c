/*
 * The helpers of csrc/cutil.h: modes, buffers, the pool's regions, MPI error text, and mpi4py's C
 * API. mpi4py's API pointers are static in each file that includes mpi4py.h, so this is the one
 * file that does: the protocol files get their communicators, windows, datatypes and operations
 * through np_comm, np_win, np_datatype and np_op.
 */
#include "cutil.h"

#include <mpi4py/mpi4py.h>
#include <string.h>

int np_mode_code(const char *what, const char *mode, unsigned allowed)
{
    static const char *const names[] = {"pingpong", "stream", "bidir"};
    for (int i = 0; i < 3; i++) {
        if (strcmp(mode, names[i]) != 0)
            continue;
        if (allowed & (1u << i))
            return i;
        PyErr_Format(PyExc_ValueError, "%s has no mode '%s'", what, mode);
        return -1;
    }
    PyErr_Format(PyExc_ValueError, "%s: unknown mode '%s'", what, mode);
    return -1;
}

int np_bufs_get(struct np_bufs *b, PyObject *s_obj, int s_flags, PyObject *r_obj, int r_flags)
{
    if (PyObject_GetBuffer(s_obj, &b->s, s_flags) < 0)
        return -1;
    if (PyObject_GetBuffer(r_obj, &b->r, r_flags) < 0) {
        PyBuffer_Release(&b->s);
        return -1;
    }
    return 0;
}

int np_bufs_check(struct np_bufs *b, Py_ssize_t s_need, Py_ssize_t r_need, const char *what)
{
    if (b->s.len >= s_need && b->r.len >= r_need)
        return 0;
    PyErr_Format(PyExc_ValueError, "%s: buffers of %zd and %zd bytes, %zd and %zd needed", what, b->s.len,
                 b->r.len, s_need, r_need);
    np_bufs_release(b);
    return -1;
}

void np_bufs_release(struct np_bufs *b)
{
    PyBuffer_Release(&b->s);
    PyBuffer_Release(&b->r);
}

/* (a * b) mod m, exactly, for a, b >= 0 and m >= 1: the product itself when it fits in 64 bits,
   else doubling and adding, where every sum stays below 2 * m < 2^64. */
static Py_ssize_t mulmod(Py_ssize_t a, Py_ssize_t b, Py_ssize_t m)
{
    unsigned long long x = (unsigned long long)(a % m), y = (unsigned long long)(b % m);
    const unsigned long long n = (unsigned long long)m;
    if (y == 0 || x <= ULLONG_MAX / y)
        return (Py_ssize_t)(x * y % n);
    unsigned long long r = 0;
    for (; y > 0; y >>= 1) {
        if (y & 1)
            r = (r + x) % n;
        x = (x + x) % n;
    }
    return (Py_ssize_t)r;
}

int np_pool_plan(struct np_pool *pool, const char *what, Py_ssize_t nbytes, Py_ssize_t per, Py_ssize_t regions,
                 Py_ssize_t stride, Py_ssize_t first)
{
    if (regions < 1 || stride < 0 || first < 0 || nbytes < 0 || per < 1 ||
        (regions > 1 && (stride < nbytes || stride > (PY_SSIZE_T_MAX - nbytes) / (regions - 1)))) {
        PyErr_Format(PyExc_ValueError, "%s: no pool of %zd regions %zd bytes apart for %zd-byte messages from %zd",
                     what, regions, stride, nbytes, first);
        return -1;
    }
    pool->regions = regions;
    pool->stride = stride;
    pool->extent = (regions - 1) * stride + nbytes;
    pool->reg = mulmod(first, per, regions); /* message first * per: Python's (first * per) % regions */
    return 0;
}

PyObject *np_mpi_error(int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    PyErr_Format(PyExc_RuntimeError, "%s failed: %s", what, text);
    return NULL;
}

int np_mpi4py_import(void)
{
    return import_mpi4py();
}

MPI_Comm *np_comm(PyObject *obj)
{
    return PyMPIComm_Get(obj);
}

MPI_Win *np_win(PyObject *obj)
{
    return PyMPIWin_Get(obj);
}

MPI_Datatype *np_datatype(PyObject *obj)
{
    return PyMPIDatatype_Get(obj);
}

MPI_Op *np_op(PyObject *obj)
{
    return PyMPIOp_Get(obj);
}
