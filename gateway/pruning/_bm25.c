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
counted per (unit, term) pair in a table of its own (collections' count went through
chain, a generator and a dict's get and set per pair), and
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

/* The keys counted so far, in the order first seen, in an open-addressing table: a key
   seen again (most of them: a term is in many units) costs a probe on its cached hash and
   a pointer compare (the units' terms come from one memo: mostly the same objects), where
   a dict's get and set cost two lookups, a resize now and then and an int each time. */
typedef struct {
    PyObject *key;  /* a new reference */
    Py_hash_t hash;
    Py_ssize_t count;
} Seen;

typedef struct {
    Seen *seen;
    Py_ssize_t n, capacity;
    Py_ssize_t *slots;  /* index + 1 into seen; 0: empty */
    size_t mask;        /* slots - 1, a power of two less one */
} Frequencies;

static void
frequencies_free(Frequencies *f)
{
    for (Py_ssize_t k = 0; k < f->n; k++) {
        Py_DECREF(f->seen[k].key);
    }
    PyMem_Free(f->seen);
    PyMem_Free(f->slots);
}

static int
frequencies_grow(Frequencies *f)
{
    size_t size = (f->mask + 1) * 2;
    Py_ssize_t *slots = PyMem_Calloc(size, sizeof(Py_ssize_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < f->n; k++) {
        size_t j = (size_t)f->seen[k].hash & (size - 1);
        while (slots[j]) {
            j = (j + 1) & (size - 1);
        }
        slots[j] = k + 1;
    }
    PyMem_Free(f->slots);
    f->slots = slots;
    f->mask = size - 1;
    return 0;
}

/* One more document holds ``key``; -1 on an error. */
static int
frequencies_add(Frequencies *f, PyObject *key)
{
    Py_hash_t hash = PyObject_Hash(key);
    if (hash == -1) {
        return -1;
    }
    size_t j = (size_t)hash & f->mask;
    for (; f->slots[j]; j = (j + 1) & f->mask) {
        Seen *s = &f->seen[f->slots[j] - 1];
        if (s->hash != hash) {
            continue;
        }
        int same = s->key == key ? 1 : PyObject_RichCompareBool(s->key, key, Py_EQ);  /* as a dict compares */
        if (same < 0) {
            return -1;
        }
        if (same) {
            s->count++;
            return 0;
        }
    }
    if (f->n == f->capacity) {
        Py_ssize_t capacity = f->capacity * 2;
        Seen *seen = PyMem_Realloc(f->seen, capacity * sizeof(Seen));
        if (seen == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        f->seen = seen;
        f->capacity = capacity;
    }
    f->seen[f->n] = (Seen){Py_NewRef(key), hash, 1};
    f->slots[j] = ++f->n;
    return (size_t)(2 * f->n) > f->mask ? frequencies_grow(f) : 0;  /* at most half full */
}

/* Every key of one document (a dict's keys, without an iterator object; else iterated). */
static int
frequencies_add_document(Frequencies *f, PyObject *document)
{
    if (PyDict_Check(document)) {
        Py_ssize_t at = 0;
        PyObject *key, *value;
        while (PyDict_Next(document, &at, &key, &value)) {
            if (frequencies_add(f, key) < 0) {
                return -1;
            }
        }
        return 0;
    }
    PyObject *keys = PyObject_GetIter(document);
    if (keys == NULL) {
        return -1;
    }
    PyObject *key;
    while ((key = PyIter_Next(keys)) != NULL) {
        int failed = frequencies_add(f, key);
        Py_DECREF(key);
        if (failed) {
            break;
        }
    }
    Py_DECREF(keys);
    return PyErr_Occurred() ? -1 : 0;
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
    Frequencies f = {PyMem_Malloc(1024 * sizeof(Seen)), 0, 1024, PyMem_Calloc(2048, sizeof(Py_ssize_t)), 2047};
    if (f.seen == NULL || f.slots == NULL) {
        frequencies_free(&f);
        return PyErr_NoMemory();
    }
    PyObject *df = NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(documents); k++) {
        if (frequencies_add_document(&f, PyList_GET_ITEM(documents, k)) < 0) {
            goto done;
        }
    }
    df = PyDict_New();
    for (Py_ssize_t k = 0; df != NULL && k < f.n; k++) {
        PyObject *count = PyLong_FromSsize_t(f.seen[k].count);
        if (count == NULL || PyDict_SetItem(df, f.seen[k].key, count) < 0) {
            Py_CLEAR(df);
        }
        Py_XDECREF(count);
    }
done:
    frequencies_free(&f);
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
