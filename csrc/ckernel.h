/*
 * What the C kernel's files share (csrc/ckernel.c: the module; csrc/cmpi.c: MPI send/receive;
 * csrc/ctcp.c: TCP sockets): the tags, the large-count switch, the clock, and each protocol's
 * entry points. One file per protocol, each with the same contract as the Python kernel's loops
 * (npmpi/sweep/kernels.py): the loop alone timed on CLOCK_MONOTONIC, elapsed seconds returned.
 */
#ifndef NPMPI_CKERNEL_H
#define NPMPI_CKERNEL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <time.h>
#include <mpi.h>
#include <string.h>

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
/* TCP sockets (csrc/ctcp.c): the loops on a connected socket's descriptor */
PyObject *np_tcp_pingpong(PyObject *self, PyObject *args);
PyObject *np_tcp_transfer(PyObject *self, PyObject *args);

#endif

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { NP_MODE_PINGPONG, NP_MODE_STREAM, NP_MODE_BIDIR };

/* A mode's name (npmpi/core/modes.py) as its code; -1 with a Python error set for another name. */
static inline int np_mode_code(const char *mode)
{
    static const char *const names[] = {"pingpong", "stream", "bidir"};
    for (int i = 0; i < 3; i++)
        if (strcmp(mode, names[i]) == 0)
            return i;
    PyErr_Format(PyExc_ValueError, "unknown mode '%s'", mode);
    return -1;
}

/* MPI two-sided send/receive (csrc/cmpi.c); np_mpi_import loads mpi4py's C API for that file */
int np_mpi_import(void);
PyObject *np_mpi_pingpong(PyObject *self, PyObject *args);
PyObject *np_mpi_transfer(PyObject *self, PyObject *args);

/* TCP sockets (csrc/ctcp.c): the loops on a connected socket's descriptor */
PyObject *np_tcp_pingpong(PyObject *self, PyObject *args);
PyObject *np_tcp_transfer(PyObject *self, PyObject *args);

/* MPI one-sided put/get (csrc/crma.c), NetPIPE's NPmpi2; memory copies (csrc/cmemcpy.c) */
int np_rma_import(void);
PyObject *np_rma_transfer(PyObject *self, PyObject *args);
PyObject *np_memcpy_transfer(PyObject *self, PyObject *args);

/* MPI collectives (csrc/ccoll.c), `npmpi coll --kernel c` */
int np_coll_import(void);
PyObject *np_collective(PyObject *self, PyObject *args);

#endif
