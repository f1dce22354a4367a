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

The corpus's statistics are here too: each term's (and entity's) document frequency,
one dict update per (unit, term) pair without an iterator step between (collections'
count went through chain and a generator: about three times the instructions), and
its inverse, the same double operations in Python's order and libm's log, which
math.log calls.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

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

/* ``counts[key] = counts.get(key, 0) + 1`` */
static int
count_one(PyObject *counts, PyObject *key)
{
    PyObject *old = PyDict_GetItemWithError(counts, key);
    if (old == NULL && PyErr_Occurred()) {
        return -1;
    }
    Py_ssize_t before = 0;
    if (old != NULL && (before = PyLong_AsSsize_t(old)) == -1 && PyErr_Occurred()) {
        return -1;
    }
    PyObject *value = PyLong_FromSsize_t(before + 1);
    if (value == NULL) {
        return -1;
    }
    int failed = PyDict_SetItem(counts, key, value);
    Py_DECREF(value);
    return failed;
}

PyDoc_STRVAR(document_frequencies_doc,
"document_frequencies(documents) -> dict\n\n"
"bm25.python_document_frequencies: per key, how many of ``documents`` (a list of dicts or\n"
"sets) hold it, in the order keys are first seen.");

static PyObject *
document_frequencies(PyObject *module, PyObject *documents)
{
    if (!PyList_Check(documents)) {
        PyErr_SetString(PyExc_TypeError, "document_frequencies() takes a list of dicts or sets");
        return NULL;
    }
    PyObject *df = PyDict_New();
    if (df == NULL) {
        return NULL;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(documents); k++) {
        PyObject *document = PyList_GET_ITEM(documents, k);
        if (PyDict_Check(document)) {
            /* A unit's term counts: its keys, without an iterator object per unit. */
            Py_ssize_t at = 0;
            PyObject *key, *value;
            while (PyDict_Next(document, &at, &key, &value)) {
                if (count_one(df, key) < 0) {
                    Py_DECREF(df);
                    return NULL;
                }
            }
            continue;
        }
        PyObject *keys = PyObject_GetIter(document);
        if (keys == NULL) {
            Py_DECREF(df);
            return NULL;
        }
        PyObject *key;
        while ((key = PyIter_Next(keys)) != NULL) {
            int failed = count_one(df, key);
            Py_DECREF(key);
            if (failed) {
                break;
            }
        }
        Py_DECREF(keys);
        if (PyErr_Occurred()) {
            Py_DECREF(df);
            return NULL;
        }
    }
    return df;
}

PyDoc_STRVAR(inverse_frequencies_doc,
"inverse_frequencies(df, n_docs) -> dict\n\n"
"bm25.python_inverse_frequencies: per key of ``df``, log(1 + (n_docs - d + 0.5) / (d + 0.5)),\n"
"the same operations as Python's on doubles and libm's log, which math.log calls.");

static PyObject *
inverse_frequencies(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_Check(args[0]) || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "inverse_frequencies() takes a dict and an int");
        return NULL;
    }
    Py_ssize_t n_docs = PyLong_AsSsize_t(args[1]);
    if (n_docs == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *idf = PyDict_New();
    if (idf == NULL) {
        return NULL;
    }
    Py_ssize_t at = 0;
    PyObject *key, *held;
    while (PyDict_Next(args[0], &at, &key, &held)) {
        Py_ssize_t d = PyLong_AsSsize_t(held);
        if (d == -1 && PyErr_Occurred()) {
            Py_DECREF(idf);
            return NULL;
        }
        /* Python: n_docs - d in ints (exact), then each operation on doubles in turn */
        double rest = (double)(n_docs - d);
        rest = rest + 0.5;
        double share = (double)d;
        share = share + 0.5;
        double ratio = rest / share;
        ratio = 1.0 + ratio;
        PyObject *value = PyFloat_FromDouble(log(ratio));
        if (value == NULL || PyDict_SetItem(idf, key, value) < 0) {
            Py_XDECREF(value);
            Py_DECREF(idf);
            return NULL;
        }
        Py_DECREF(value);
    }
    return idf;
}

static PyMethodDef methods[] = {
    {"query_side", (PyCFunction)(void (*)(void))query_side, METH_FASTCALL, query_side_doc},
    {"counts_side", (PyCFunction)(void (*)(void))counts_side, METH_FASTCALL, counts_side_doc},
    {"document_frequencies", (PyCFunction)document_frequencies, METH_O, document_frequencies_doc},
    {"inverse_frequencies", (PyCFunction)(void (*)(void))inverse_frequencies, METH_FASTCALL,
     inverse_frequencies_doc},
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
