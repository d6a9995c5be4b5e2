/*
 * The C kernel's entry points, one file per protocol, each with the contract of the Python
 * kernel's loops (npmpi/persize/kernels.py): the loop alone timed on CLOCK_MONOTONIC, elapsed
 * seconds returned. Only the module (csrc/ckernel.c, its method table) includes this header; what
 * the protocol files share is csrc/cutil.h's.
 */
#ifndef NPMPI_CENTRIES_H
#define NPMPI_CENTRIES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* MPI two-sided send/receive (csrc/cmpi.c) */
PyObject *np_mpi_pingpong(PyObject *self, PyObject *args);
PyObject *np_mpi_transfer(PyObject *self, PyObject *args);

/* TCP sockets (csrc/ctcp.c): the loops on a connected socket's descriptor */
PyObject *np_tcp_pingpong(PyObject *self, PyObject *args);
PyObject *np_tcp_transfer(PyObject *self, PyObject *args);

/* MPI one-sided put/get (csrc/crma.c), NetPIPE's NPmpi2; memory copies (csrc/cmemcpy.c) */
PyObject *np_rma_transfer(PyObject *self, PyObject *args);
PyObject *np_memcpy_transfer(PyObject *self, PyObject *args);

/* MPI collectives (csrc/ccoll.c), `npmpi coll --kernel c` */
PyObject *np_collective(PyObject *self, PyObject *args);

#endif
