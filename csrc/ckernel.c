/*
 * npmpi._ckernel: the timed loops in C, one file per protocol (csrc/cmpi.c, ctcp.c, crma.c,
 * cmemcpy.c, ccoll.c; their entry points in csrc/centries.h, what they share in csrc/cutil.h), with
 * the same contract as the Python kernel (npmpi/persize/kernels.py): the loop alone timed on
 * CLOCK_MONOTONIC (the clock of Python's perf_counter), elapsed seconds returned. This file is the
 * module: its method table, the linked MPI's version and the clock's resolution and read cost.
 */
#include "centries.h"
#include "cutil.h"

static PyObject *library_version(PyObject *self, PyObject *unused)
{
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(text, &len);
    return PyUnicode_DecodeUTF8(text, len, "replace");
}

static PyObject *clock_info(PyObject *self, PyObject *args)
{
    /* (resolution reported by clock_getres, mean cost of one clock read) in seconds */
    Py_ssize_t reads = 100000;
    if (!PyArg_ParseTuple(args, "|n", &reads))
        return NULL;
    if (reads < 2)
        reads = 2;
    struct timespec res;
    clock_getres(CLOCK_MONOTONIC, &res);
    volatile double sink = 0.0;
    double t0 = now_s();
    for (Py_ssize_t i = 0; i < reads; i++)
        sink += now_s();
    double t1 = now_s();
    (void)sink;
    return Py_BuildValue("dd", (double)res.tv_sec + 1e-9 * (double)res.tv_nsec, (t1 - t0) / (double)reads);
}

static PyMethodDef methods[] = {
    {"pingpong", np_mpi_pingpong, METH_VARARGS,
     "pingpong(comm, peer, sendbuf, recvbuf, nbytes, iterations, transmitter) -> elapsed seconds"},
    {"transfer", np_mpi_transfer, METH_VARARGS,
     "transfer(comm, peer, sendbuf, recvbuf, nbytes, iterations, transmitter, mode, window, async, "
     "regions, stride, first) -> elapsed seconds (see npmpi.persize.kernels.python_transfer)"},
    {"tcp_pingpong", np_tcp_pingpong, METH_VARARGS,
     "tcp_pingpong(fd, sendbuf, recvbuf, nbytes, iterations, transmitter) -> elapsed seconds"},
    {"tcp_transfer", np_tcp_transfer, METH_VARARGS,
     "tcp_transfer(fd, sendbuf, recvbuf, nbytes, iterations, transmitter, mode, window, regions, stride, "
     "first) -> elapsed seconds (see npmpi.protocols.tcp.loops.tcp_transfer)"},
    {"rma_transfer", np_rma_transfer, METH_VARARGS,
     "rma_transfer(comm, win, flag_win, flags, peer, sendbuf, recvbuf, nbytes, iterations, transmitter, "
     "mode, window, regions, stride, first, get, lock) -> elapsed seconds (npmpi.protocols.rma.loops)"},
    {"memcpy_transfer", np_memcpy_transfer, METH_VARARGS,
     "memcpy_transfer(src, dst, nbytes, iterations, mode, window, regions, stride, first) -> elapsed "
     "seconds (npmpi.protocols.memcpy.loops)"},
    {"collective", np_collective, METH_VARARGS,
     "collective(comm, op_code, sendbuf, recvbuf, count, datatype, mpi_op, iterations, per_call=0) -> "
     "elapsed seconds (npmpi.coll.step; per_call: each call timed, a barrier after it, as OSU's)"},
    {"library_version", library_version, METH_NOARGS, "MPI_Get_library_version of the linked MPI"},
    {"clock_info", clock_info, METH_VARARGS, "clock_info(reads=100000) -> (resolution_s, read_cost_s)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ckernel", "npmpi's C kernel: each protocol's timed loops (npmpi/persize/kernels.py)",
    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__ckernel(void)
{
    if (np_mpi4py_import() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "MPI_VERSION", MPI_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "MPI_SUBVERSION", MPI_SUBVERSION) < 0 ||
        PyModule_AddIntConstant(m, "COLLECTIVE_PER_CALL", 1) < 0 ||
        PyModule_AddObject(m, "MAX_COUNT", PyLong_FromSsize_t(NP_MAX_COUNT)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
