/*
 * MPI collectives, `python -m npmpi coll --kernel c` (npmpi/coll/step.py): `iterations` calls of one
 * collective back to back on the group's communicator, timed as a whole (or, per_call, each call timed
 * on its own with an untimed MPI_Barrier after it, as OSU 7.4's loops), with the same buffers,
 * datatype, reduction and counts as the Python kernel's mpi4py calls. The communicator, datatype and
 * MPI_Op come from mpi4py through its C API, so both kernels use one MPI library.
 */
#include "cutil.h"

/* the op codes of npmpi/coll/step.py's C_CODES */
enum { NP_ALLREDUCE, NP_ALLGATHER, NP_ALLTOALL, NP_BCAST, NP_REDUCE, NP_REDUCE_SCATTER, NP_BARRIER };

static const char *const coll_names[] = {"MPI_Allreduce", "MPI_Allgather", "MPI_Alltoall", "MPI_Bcast",
                                         "MPI_Reduce", "MPI_Reduce_scatter_block", "MPI_Barrier"};

/* One call of the op (count items per block; reduce_scatter: count / ranks items each). */
static inline int coll_once(int code, void *s, void *r, int count, int share, MPI_Datatype t, MPI_Op op,
                            MPI_Comm c)
{
    switch (code) {
    case NP_ALLREDUCE: return MPI_Allreduce(s, r, count, t, op, c);
    case NP_ALLGATHER: return MPI_Allgather(s, count, t, r, count, t, c);
    case NP_ALLTOALL: return MPI_Alltoall(s, count, t, r, count, t, c);
    case NP_BCAST: return MPI_Bcast(r, count, t, 0, c);
    case NP_REDUCE: return MPI_Reduce(s, r, count, t, op, 0, c);
    case NP_REDUCE_SCATTER: return MPI_Reduce_scatter_block(s, r, share, t, op, c);
    default: return MPI_Barrier(c);
    }
}

/* The bytes each buffer must hold: blocks of count items (send, receive). */
static void coll_needs(int code, Py_ssize_t block, int ranks, Py_ssize_t *send, Py_ssize_t *recv)
{
    *send = code == NP_ALLTOALL ? block * ranks : code == NP_BARRIER || code == NP_BCAST ? 0 : block;
    *recv = code == NP_ALLGATHER || code == NP_ALLTOALL ? block * ranks
            : code == NP_REDUCE_SCATTER                 ? block / ranks
            : code == NP_BARRIER                        ? 0
                                                        : block;
}

PyObject *np_collective(PyObject *self, PyObject *args)
{
    PyObject *comm_obj, *send_obj, *recv_obj, *type_obj, *op_obj;
    int code, ranks = 0, item = 0, per_call = 0;
    Py_ssize_t count, iterations, send_need, recv_need;
    if (!PyArg_ParseTuple(args, "OiOOnOOn|i", &comm_obj, &code, &send_obj, &recv_obj, &count, &type_obj, &op_obj,
                          &iterations, &per_call))
        return NULL;
    MPI_Comm *comm = np_comm(comm_obj);
    MPI_Datatype *type = comm ? np_datatype(type_obj) : NULL;
    MPI_Op *op = type ? np_op(op_obj) : NULL;
    if (op == NULL)
        return NULL;
    if (code < NP_ALLREDUCE || code > NP_BARRIER || count < 0 || count > INT_MAX || iterations < 0) {
        PyErr_Format(PyExc_ValueError, "collective: op %d, count %zd or iterations %zd out of range", code, count,
                     iterations);
        return NULL;
    }
    MPI_Comm_size(*comm, &ranks);
    MPI_Type_size(*type, &item);
    coll_needs(code, count * item, ranks, &send_need, &recv_need);
    struct np_bufs b;
    if (np_bufs_get(&b, send_obj, PyBUF_SIMPLE, recv_obj, PyBUF_WRITABLE) < 0 ||
        np_bufs_check(&b, send_need, recv_need, coll_names[code]) < 0)
        return NULL;
    void *s = b.s.buf, *r = b.r.buf;
    const int n = (int)count, share = (int)(count / ranks);
    MPI_Datatype t = *type;
    MPI_Op o = *op;
    MPI_Comm c = *comm;
    int rc = MPI_SUCCESS;
    double t0, t1, elapsed = 0.0;
    Py_BEGIN_ALLOW_THREADS
    if (per_call) {
        for (Py_ssize_t i = 0; i < iterations && rc == MPI_SUCCESS; i++) {
            t0 = now_s();
            rc = coll_once(code, s, r, n, share, t, o, c);
            t1 = now_s();
            elapsed += t1 - t0;
            if (rc == MPI_SUCCESS)
                rc = MPI_Barrier(c);
        }
    } else {
        t0 = now_s();
        for (Py_ssize_t i = 0; i < iterations && rc == MPI_SUCCESS; i++)
            rc = coll_once(code, s, r, n, share, t, o, c);
        t1 = now_s();
        elapsed = t1 - t0;
    }
    Py_END_ALLOW_THREADS
    np_bufs_release(&b);
    if (rc != MPI_SUCCESS)
        return np_mpi_error(rc, coll_names[code]);
    return PyFloat_FromDouble(elapsed);
}
