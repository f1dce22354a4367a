/* The inner sums of the local scorer's BM25, in C (bm25.py is the same in Python).

A cold prune scores every candidate twice against a query of a few hundred terms
(the request, the recent window, the goal; then the same with feedback terms): in
Python each candidate's sum went through map, compress, filter and a float object
per hit. Here it is a dict lookup per term and the same float operations, in the
same order, on doubles: the same bits as Python's. Python rounds each operation, so
this is built without fused multiply-adds (setup.py: -ffp-contract=off; GCC
contracts by default where the target has them, arm64 for one), and each operation
is a statement of its own. tests/unit/pruning/test_bm25.py holds the two equal, bit
for bit.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* A number as Python's float arithmetic reads it (an int converted exactly as float() does). */
static inline int
as_double(PyObject *number, double *out)
{
    *out = PyFloat_Check(number) ? PyFloat_AS_DOUBLE(number) : PyFloat_AsDouble(number);
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}

PyDoc_STRVAR(query_side_doc,
"query_side(counts, terms, weights, norm) -> float\n\n"
"bm25.python_query_side: the sum over the query's terms a unit holds, in the query's order.");

static PyObject *
query_side(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_Check(args[0]) || !PyList_Check(args[1]) || !PyList_Check(args[2])
            || PyList_GET_SIZE(args[1]) != PyList_GET_SIZE(args[2])) {
        PyErr_SetString(PyExc_TypeError, "query_side() takes a dict, two lists of one length and a float");
        return NULL;
    }
    PyObject *counts = args[0], *terms = args[1], *weights = args[2];
    double norm, s = 0.0;
    if (as_double(args[3], &norm) < 0) {
        return NULL;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(terms); k++) {
        PyObject *held = PyDict_GetItemWithError(counts, PyList_GET_ITEM(terms, k));
        if (held == NULL) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            continue;
        }
        int truth = PyObject_IsTrue(held);
        if (truth <= 0) {
            if (truth < 0) {
                return NULL;
            }
            continue;
        }
        double weight, count;
        if (as_double(PyList_GET_ITEM(weights, k), &weight) < 0 || as_double(held, &count) < 0) {
            return NULL;
        }
        double part = weight * count;
        part = part / (count + norm);
        s = s + part;
    }
    return PyFloat_FromDouble(s);
}

PyDoc_STRVAR(counts_side_doc,
"counts_side(counts, query_idf, norm, k1) -> float\n\n"
"bm25.python_counts_side: the sum over a unit's terms the query weighs, in the unit's order.");

static PyObject *
counts_side(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "counts_side() takes two dicts and two floats");
        return NULL;
    }
    PyObject *counts = args[0], *query_idf = args[1];
    double norm, k1, s = 0.0;
    if (as_double(args[2], &norm) < 0 || as_double(args[3], &k1) < 0) {
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *term, *held;
    while (PyDict_Next(counts, &pos, &term, &held)) {
        PyObject *weighed = PyDict_GetItemWithError(query_idf, term);
        if (weighed == NULL) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            continue;
        }
        int truth = PyObject_IsTrue(weighed);
        if (truth <= 0) {
            if (truth < 0) {
                return NULL;
            }
            continue;
        }
        double weight, count;
        if (as_double(weighed, &weight) < 0 || as_double(held, &count) < 0) {
            return NULL;
        }
        double part = weight * count;
        part = part * (k1 + 1.0);
        part = part / (count + norm);
        s = s + part;
    }
    return PyFloat_FromDouble(s);
}

static PyMethodDef methods[] = {
    {"query_side", (PyCFunction)(void (*)(void))query_side, METH_FASTCALL, query_side_doc},
    {"counts_side", (PyCFunction)(void (*)(void))counts_side, METH_FASTCALL, counts_side_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gateway.pruning._bm25",
    .m_doc = "The inner sums of the local scorer's BM25, in C (bm25.py is the same in Python).",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__bm25(void)
{
    return PyModuleDef_Init(&module);
}
