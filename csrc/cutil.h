/*
 * What every protocol file of the C kernel uses (as OSU's c/util/osu_util.h beside its one file per
 * benchmark): the tags, the large-count switch, the clock, the modes by name, two buffers got,
 * checked and released together, the plan of a cache-cold pool's regions, MPI's error text, and
 * mpi4py's C API (imported once, in csrc/cutil.c). The entry points live in csrc/centries.h,
 * which only the module (csrc/ckernel.c) includes.
 */
#ifndef NPMPI_CUTIL_H
#define NPMPI_CUTIL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <mpi.h>
#include <time.h>

#define DATA_TAG 1
#define ACK_TAG 2

#if MPI_VERSION >= 4
typedef MPI_Count np_count_t;
#define NP_MAX_COUNT ((Py_ssize_t)PY_SSIZE_T_MAX)
#define NP_SEND MPI_Send_c
#define NP_RECV MPI_Recv_c
#define NP_ISEND MPI_Isend_c
#define NP_IRECV MPI_Irecv_c
#else
typedef int np_count_t;
#define NP_MAX_COUNT ((Py_ssize_t)INT_MAX)
#define NP_SEND MPI_Send
#define NP_RECV MPI_Recv
#define NP_ISEND MPI_Isend
#define NP_IRECV MPI_Irecv
#endif

/* CLOCK_MONOTONIC in seconds (the clock of Python's perf_counter); inline: the timed loops read it */
static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The modes (npmpi/core/modes.py), by the code np_mode_code gives their names. */
enum { NP_MODE_PINGPONG, NP_MODE_STREAM, NP_MODE_BIDIR };
#define NP_MODES_ALL ((1u << NP_MODE_PINGPONG) | (1u << NP_MODE_STREAM) | (1u << NP_MODE_BIDIR))

/* A mode's name as its code, if its bit is in `allowed`; -1 with a ValueError set for another
   name or a mode `what` (the entry's name) has not. */
int np_mode_code(const char *what, const char *mode, unsigned allowed);

/* A call's two buffers (send and receive; rma: flag and origin), got, checked, released together. */
struct np_bufs {
    Py_buffer s, r;
};

/* Both objects' buffers (flags: PyBUF_SIMPLE to read, PyBUF_WRITABLE to write); -1 with a Python
   error set, none held. */
int np_bufs_get(struct np_bufs *b, PyObject *s_obj, int s_flags, PyObject *r_obj, int r_flags);

/* 0 if the buffers hold s_need and r_need bytes; else -1 with a ValueError naming `what`, both
   released. */
int np_bufs_check(struct np_bufs *b, Py_ssize_t s_need, Py_ssize_t r_need, const char *what);

void np_bufs_release(struct np_bufs *b);

/* A cache-cold pool (npmpi/core/modes.py's regions): message m uses region m % regions, `stride`
   bytes apart, in both pools. */
struct np_pool {
    Py_ssize_t regions, stride;
    Py_ssize_t extent; /* the bytes a pool spans: (regions - 1) * stride + the message */
    Py_ssize_t reg;    /* the region of the call's first message, first * per mod regions */
};

/* The pool of a call whose iterations are numbered from `first`, with `per` messages one way
   each: regions >= 1, stride >= 0 (and >= nbytes with several regions), first >= 0, the extent
   within Py_ssize_t; -1 with a ValueError naming `what`. */
int np_pool_plan(struct np_pool *pool, const char *what, Py_ssize_t nbytes, Py_ssize_t per, Py_ssize_t regions,
                 Py_ssize_t stride, Py_ssize_t first);

/* RuntimeError "<what> failed: <MPI's text of rc>"; returns NULL. */
PyObject *np_mpi_error(int rc, const char *what);

/* mpi4py's C API: imported once (the module's init), its objects' handles; NULL with a Python
   error set for an object of another type. */
int np_mpi4py_import(void);
MPI_Comm *np_comm(PyObject *obj);
MPI_Win *np_win(PyObject *obj);
MPI_Datatype *np_datatype(PyObject *obj);
MPI_Op *np_op(PyObject *obj);

#endif
