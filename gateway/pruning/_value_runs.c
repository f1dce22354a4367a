/* The runs of a text that may hold a value, in C (value_runs.py is the same in Python).

Masks keep the ids of every tool output, and omission markers list those of the
spans they stand for: a cold prune of 100k tokens reads every tool output for
them. In Python a text was split into all its runs (``bytes.translate`` and
``str.split``: a string object per word), deduplicated (a hash per word), and
each distinct run tested by a regex (a dict lookup per word); yet most runs are
plain words that hold no value. Here the test is made on the characters while
the run is scanned, and only a run that passes becomes a string: about a
twentieth of the words of a JSON output.

What a run is, and the tests, are value_runs.py's (its docstring says why each):
runs of ``\w`` and ``#.+@-:/$``; with ``unescape``, a JSON escape's letter
(``\n``, ``\t``, ``\r`` not before a small letter) separates like the space it
stands for. ``quoted_codes`` reads the codes that are a JSON text's whole string
values (ids.field_codes) the same way: per quote, on the characters. Each function
gives exactly what its Python twin gives
(tests/unit/pruning/test_value_runs.py holds them to it).
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* ``\w`` as the re module reads it in a str pattern: str.isalnum() or '_'. */
static inline int
is_word(Py_UCS4 ch)
{
    if (ch < 128) {
        return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
    }
    return Py_UNICODE_ISALNUM(ch);
}

/* The characters a run holds besides ``\w`` (values.RUN_CHARS). */
static inline int
is_run_extra(Py_UCS4 ch)
{
    return ch == '#' || ch == '.' || ch == '+' || ch == '@' || ch == '-' || ch == ':' || ch == '/' || ch == '$';
}

typedef struct {
    int kind;
    const void *data;
    Py_ssize_t length;
    int unescape;
} Text;

/* Is the character at ``i`` in a run? Not a JSON escape's letter when unescaping:
   ``\\[ntr](?![a-z])``, the letter after a backslash (which is no run character). */
static inline int
in_run(const Text *t, Py_ssize_t i, Py_UCS4 ch)
{
    if (!is_word(ch) && !is_run_extra(ch)) {
        return 0;
    }
    if (t->unescape && (ch == 'n' || ch == 't' || ch == 'r') && i > 0
            && PyUnicode_READ(t->kind, t->data, i - 1) == '\\') {
        if (i + 1 >= t->length) {
            return 0;
        }
        Py_UCS4 next = PyUnicode_READ(t->kind, t->data, i + 1);
        return next >= 'a' && next <= 'z';
    }
    return 1;
}

enum { MAY_HOLD = 0, MAY_BE_STRONG = 1 };

/* Scans the run at ``start`` (a run character); returns its end and sets ``*passes``:
   MAY_BE_STRONG, a digit, '@' or '/' in it; MAY_HOLD, value_runs.MAY_HOLD (a digit,
   '_', '@', '/', '$' or '#'; a dot between word characters; a small letter then a
   capital; two capitals with only word characters between them). */
static Py_ssize_t
scan_run(const Text *t, Py_ssize_t start, int test, int *passes)
{
    int found = 0;
    int after_word = 0;          /* the previous character is \w */
    int after_small = 0;         /* ... is [a-z] */
    int after_word_dot = 0;      /* ... is a '.' after a \w */
    int capitals = 0;            /* [A-Z] since the last character that is not \w */
    Py_ssize_t i = start;
    for (; i < t->length; i++) {
        Py_UCS4 ch = PyUnicode_READ(t->kind, t->data, i);
        if (!in_run(t, i, ch)) {
            break;
        }
        if (found) {
            continue;  /* the run's end is all that is left to find */
        }
        if (test == MAY_BE_STRONG) {
            found = (ch >= '0' && ch <= '9') || ch == '@' || ch == '/';
            continue;
        }
        int word = is_word(ch);
        if ((ch >= '0' && ch <= '9') || ch == '_' || ch == '@' || ch == '/' || ch == '$' || ch == '#') {
            found = 1;
        }
        else if (word && after_word_dot) {
            found = 1;
        }
        else if (ch >= 'A' && ch <= 'Z') {
            found = after_small || ++capitals >= 2;
        }
        after_word_dot = ch == '.' && after_word;
        after_small = ch >= 'a' && ch <= 'z';
        after_word = word;
        if (!word) {
            capitals = 0;
        }
    }
    *passes = found;
    return i;
}

/* Calls ``each(run, start, arg)`` for every run of ``text`` that passes ``test``; -1 on an error. */
static int
each_run(PyObject *text, int test, int unescape, int (*each)(PyObject *, Py_ssize_t, void *), void *arg)
{
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text), unescape};
    Py_ssize_t i = 0;
    while (i < t.length) {
        Py_UCS4 ch = PyUnicode_READ(t.kind, t.data, i);
        if (!in_run(&t, i, ch)) {
            i++;
            continue;
        }
        int passes;
        Py_ssize_t end = scan_run(&t, i, test, &passes);
        if (passes) {
            PyObject *run = PyUnicode_Substring(text, i, end);
            if (run == NULL) {
                return -1;
            }
            int failed = each(run, i, arg);
            Py_DECREF(run);
            if (failed) {
                return -1;
            }
        }
        i = end;
    }
    return 0;
}

typedef struct {
    PyObject *seen;
    PyObject *found;
} Distinct;

static int
add_distinct(PyObject *run, Py_ssize_t start, void *arg)
{
    Distinct *d = arg;
    int seen = PySet_Contains(d->seen, run);
    if (seen != 0) {
        return seen < 0 ? -1 : 0;
    }
    return PySet_Add(d->seen, run) < 0 || PyList_Append(d->found, run) < 0 ? -1 : 0;
}

PyDoc_STRVAR(value_runs_doc,
"value_runs(text, strong) -> list[str]\n\n"
"The distinct runs of ``text`` (JSON escapes separating), first occurrence first, that\n"
"may hold a value (``strong``: one that names a record).");

static PyObject *
value_runs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "value_runs() takes a str and a bool");
        return NULL;
    }
    int strong = PyObject_IsTrue(args[1]);
    if (strong < 0) {
        return NULL;
    }
    Distinct d = {PySet_New(NULL), PyList_New(0)};
    if (d.seen == NULL || d.found == NULL
            || each_run(args[0], strong ? MAY_BE_STRONG : MAY_HOLD, 1, add_distinct, &d) < 0) {
        Py_XDECREF(d.seen);
        Py_XDECREF(d.found);
        return NULL;
    }
    Py_DECREF(d.seen);
    return d.found;
}

static int
add_span(PyObject *run, Py_ssize_t start, void *found)
{
    PyObject *span = Py_BuildValue("(nO)", start, run);
    if (span == NULL) {
        return -1;
    }
    int failed = PyList_Append(found, span);
    Py_DECREF(span);
    return failed;
}

PyDoc_STRVAR(value_spans_doc,
"value_spans(text) -> list[tuple[int, str]]\n\n"
"Every run of ``text`` as it stands (escapes and all) that may hold a value, with where\n"
"it starts.");

static PyObject *
value_spans(PyObject *module, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "value_spans() takes a str");
        return NULL;
    }
    PyObject *found = PyList_New(0);
    if (found == NULL || each_run(text, MAY_HOLD, 0, add_span, found) < 0) {
        Py_XDECREF(found);
        return NULL;
    }
    return found;
}

/* ``[A-Za-z_]``, ``[a-z0-9+-]``, ``[A-Z_.]``: the parts of value_runs.CODE. */
static inline int
is_code_start(Py_UCS4 ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}

static inline int
is_code_small(Py_UCS4 ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '+' || ch == '-';
}

static inline int
is_code_mark(Py_UCS4 ch)
{
    return (ch >= 'A' && ch <= 'Z') || ch == '_' || ch == '.';
}

/* The end of a quoted code whose opening quote is at ``quote`` (after the ``,``, ``}``
   or ``]`` that closes it), or -1; ``*end`` is set to its closing quote. A code's
   characters are ``[\w.+-]``, which hold no quote, so the regex's code ends where they do. */
static Py_ssize_t
quoted_code_at(int kind, const void *data, Py_ssize_t length, Py_ssize_t quote, Py_ssize_t *end)
{
    Py_ssize_t i = quote + 1;
    if (i >= length || !is_code_start(PyUnicode_READ(kind, data, i))) {
        return -1;
    }
    /* The first character after the first that is not [a-z0-9+-] must be [A-Z_.]: the
       two sets are apart, so no backtracking finds another. */
    for (i++; i < length && is_code_small(PyUnicode_READ(kind, data, i)); i++) {
    }
    if (i >= length || !is_code_mark(PyUnicode_READ(kind, data, i))) {
        return -1;
    }
    for (i++; i < length; i++) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        if (!is_word(ch) && ch != '.' && ch != '+' && ch != '-') {
            break;
        }
    }
    if (i >= length || PyUnicode_READ(kind, data, i) != '"') {
        return -1;
    }
    *end = i;
    for (i++; i < length && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i)); i++) {
    }
    if (i >= length) {
        return -1;
    }
    Py_UCS4 ch = PyUnicode_READ(kind, data, i);
    return ch == ',' || ch == '}' || ch == ']' ? i + 1 : -1;
}

PyDoc_STRVAR(quoted_codes_doc,
"quoted_codes(text) -> list[str]\n\n"
"``value_runs.QUOTED_CODE.findall(text)``: the codes that are whole string values of a\n"
"JSON text (the regex tried a match at every quote, keys and all, ~100 instructions each).");

static PyObject *
quoted_codes(PyObject *module, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "quoted_codes() takes a str");
        return NULL;
    }
    const int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    const Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    PyObject *found = PyList_New(0);
    if (found == NULL) {
        return NULL;
    }
    Py_ssize_t i = 0;
    while (i < length) {
        if (PyUnicode_READ(kind, data, i) != '"') {
            i++;
            continue;
        }
        Py_ssize_t end = 0, after = quoted_code_at(kind, data, length, i, &end);
        if (after < 0) {
            i++;  /* as the regex: the next try starts after this quote */
            continue;
        }
        PyObject *code = PyUnicode_Substring(text, i + 1, end);
        if (code == NULL || PyList_Append(found, code) < 0) {
            Py_XDECREF(code);
            Py_DECREF(found);
            return NULL;
        }
        Py_DECREF(code);
        i = after;
    }
    return found;
}

static PyMethodDef methods[] = {
    {"value_runs", (PyCFunction)(void (*)(void))value_runs, METH_FASTCALL, value_runs_doc},
    {"value_spans", (PyCFunction)value_spans, METH_O, value_spans_doc},
    {"quoted_codes", (PyCFunction)quoted_codes, METH_O, quoted_codes_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gateway.pruning._value_runs",
    .m_doc = "The runs of a text that may hold a value, in C (value_runs.py is the same in Python).",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__value_runs(void)
{
    return PyModuleDef_Init(&module);
}
