/*
 * npmpi._ckernel: the ping-pong timed loop in C, with the same contract as the Python kernel
 * (npmpi/kernels.py): blocking MPI_Send/MPI_Recv of `nbytes` bytes, `iterations` round trips,
 * elapsed seconds of the loop alone on CLOCK_MONOTONIC (the clock of Python's perf_counter).
 * The communicator comes from mpi4py through its C API, so both kernels use one MPI library.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <time.h>
#include <mpi.h>
#include <mpi4py/mpi4py.h>

#define DATA_TAG 1

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static PyObject *mpi_error(int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    PyErr_Format(PyExc_RuntimeError, "%s failed: %s", what, text);
    return NULL;
}

static PyObject *pingpong(PyObject *self, PyObject *args)
{
    PyObject *comm_obj, *send_obj, *recv_obj;
    int peer, transmitter;
    Py_ssize_t nbytes, iterations;
    if (!PyArg_ParseTuple(args, "OiOOnnp", &comm_obj, &peer, &send_obj, &recv_obj, &nbytes,
                          &iterations, &transmitter))
        return NULL;
    MPI_Comm *comm = PyMPIComm_Get(comm_obj);
    if (comm == NULL)
        return NULL;
    if (nbytes < 0 || nbytes > INT_MAX) {
        PyErr_Format(PyExc_OverflowError, "message size %zd bytes is outside 0..%d", nbytes, INT_MAX);
        return NULL;
    }
    if (iterations < 0) {
        PyErr_SetString(PyExc_ValueError, "iterations must not be negative");
        return NULL;
    }
    Py_buffer sbuf, rbuf;
    if (PyObject_GetBuffer(send_obj, &sbuf, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(recv_obj, &rbuf, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&sbuf);
        return NULL;
    }
    if (sbuf.len < nbytes || rbuf.len < nbytes) {
        PyBuffer_Release(&sbuf);
        PyBuffer_Release(&rbuf);
        PyErr_Format(PyExc_ValueError, "buffers (%zd, %zd bytes) are smaller than the message (%zd)",
                     sbuf.len, rbuf.len, nbytes);
        return NULL;
    }
    const int count = (int)nbytes;
    void *s = sbuf.buf, *r = rbuf.buf;
    MPI_Comm c = *comm;
    int rc = MPI_SUCCESS;
    const char *failed = NULL;
    double t0, t1;

    Py_BEGIN_ALLOW_THREADS
    if (transmitter) {
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iterations; i++) {
            rc = MPI_Send(s, count, MPI_BYTE, peer, DATA_TAG, c);
            if (rc != MPI_SUCCESS) { failed = "MPI_Send"; break; }
            rc = MPI_Recv(r, count, MPI_BYTE, peer, DATA_TAG, c, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) { failed = "MPI_Recv"; break; }
        }
        t1 = now_s();
    } else {
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iterations; i++) {
            rc = MPI_Recv(r, count, MPI_BYTE, peer, DATA_TAG, c, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) { failed = "MPI_Recv"; break; }
            rc = MPI_Send(s, count, MPI_BYTE, peer, DATA_TAG, c);
            if (rc != MPI_SUCCESS) { failed = "MPI_Send"; break; }
        }
        t1 = now_s();
    }
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&sbuf);
    PyBuffer_Release(&rbuf);
    if (failed != NULL)
        return mpi_error(rc, failed);
    return PyFloat_FromDouble(t1 - t0);
}

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
    {"pingpong", pingpong, METH_VARARGS,
     "pingpong(comm, peer, sendbuf, recvbuf, nbytes, iterations, transmitter) -> elapsed seconds"},
    {"library_version", library_version, METH_NOARGS, "MPI_Get_library_version of the linked MPI"},
    {"clock_info", clock_info, METH_VARARGS, "clock_info(reads=100000) -> (resolution_s, read_cost_s)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ckernel",
                                    "npmpi's C ping-pong kernel (see npmpi/kernels.py)", -1, methods};

PyMODINIT_FUNC PyInit__ckernel(void)
{
    if (import_mpi4py() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "MPI_VERSION", MPI_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "MPI_SUBVERSION", MPI_SUBVERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
