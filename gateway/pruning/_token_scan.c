/* The token loop of text_features.analyse, in C (token_scan.py is the same in Python).

At a cold prune the local scorer reads every unit of the conversation once:
``analyse`` splits each text into tokens (the regex ``#?\w[\w\-]*``), counts
the distinct ones, and sums the terms, entities and flags that text_features
gives a token (a memo, filled in Python on a token's first sight). In Python
that loop paid the interpreter per token and per term: about a fifth of the
instructions of a cold prune of 100k tokens (docs/speed.md). Here it is one
pass over the characters, a token's repeats counted on its characters (a string
and a few dict operations per distinct token only); what a token means stays in
Python, where the memo computes it once per distinct token.

``quoted`` is the other scan of analyse over a whole text: the quoted strings
of a JSON tool output, which the regex engine read at ~100 instructions a
character (a tenth of analyse).

Each function gives exactly what token_scan.py's twin does (tests/unit/pruning/
test_token_scan.py holds them to it): the same tokens, and dicts and sets
filled in the same order, since the scorer's sums run in that order.
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

/* A text read token by token. */
typedef struct {
    PyObject *text;
    int kind;
    const void *data;
    Py_ssize_t length;
    Py_ssize_t at;
} Tokens;

static void
tokens_start(Tokens *t, PyObject *text)
{
    t->text = text;
    t->kind = PyUnicode_KIND(text);
    t->data = PyUnicode_DATA(text);
    t->length = PyUnicode_GET_LENGTH(text);
    t->at = 0;
}

/* Finds the next match of ``#?\w[\w\-]*`` as findall would scan: a '#' starts a
   token only before a word character, a '-' never does. Sets [*start, *end) and
   returns 1; 0 at the end. */
static int
tokens_next_span(Tokens *t, Py_ssize_t *start, Py_ssize_t *end)
{
    const int kind = t->kind;
    const void *data = t->data;
    const Py_ssize_t length = t->length;
    Py_ssize_t i = t->at;

    for (;; i++) {
        if (i >= length) {
            t->at = length;
            return 0;
        }
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        if (is_word(ch)) {
            *start = i;
            break;
        }
        if (ch == '#' && i + 1 < length && is_word(PyUnicode_READ(kind, data, i + 1))) {
            *start = i++;  /* the word character after the '#' is the token's second */
            break;
        }
    }
    for (i++; i < length; i++) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        if (!is_word(ch) && ch != '-') {
            break;
        }
    }
    t->at = *end = i;
    return 1;
}

/* The next token (a new reference); NULL at the end, or on an error (then with an
   exception set). */
static PyObject *
tokens_next(Tokens *t)
{
    Py_ssize_t start, end;
    return tokens_next_span(t, &start, &end) ? PyUnicode_Substring(t->text, start, end) : NULL;
}

PyDoc_STRVAR(tokens_doc,
"tokens(text) -> list[str]\n\n"
"``re.findall(r\"#?\\w[\\w\\-]*\", text)``.");

static PyObject *
tokens(PyObject *module, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "tokens() takes a str");
        return NULL;
    }
    PyObject *found = PyList_New(0);
    if (found == NULL) {
        return NULL;
    }
    Tokens t;
    tokens_start(&t, text);
    PyObject *token;
    while ((token = tokens_next(&t)) != NULL) {
        int failed = PyList_Append(found, token);
        Py_DECREF(token);
        if (failed) {
            Py_DECREF(found);
            return NULL;
        }
    }
    if (PyErr_Occurred()) {
        Py_DECREF(found);
        return NULL;
    }
    return found;
}

PyDoc_STRVAR(quoted_doc,
"quoted(text) -> list[str]\n\n"
"``re.findall(r'\"([^\"\\n]{2,60})\"', text)``: a tool output in JSON is mostly quotes, and\n"
"the regex engine costs about 100 instructions a character there.");

static PyObject *
quoted(PyObject *module, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "quoted() takes a str");
        return NULL;
    }
    const int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    const Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    PyObject *found = PyList_New(0);
    if (found == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < length; i++) {
        if (PyUnicode_READ(kind, data, i) != '"') {
            continue;
        }
        /* The run after this quote; a match if it holds 2 to 60 characters and a quote
           ends it. Else the regex tries the next position, inside the run: no quote there. */
        Py_ssize_t end = i + 1;
        Py_UCS4 ch = 0;
        while (end < length && end - i <= 61 && (ch = PyUnicode_READ(kind, data, end)) != '"' && ch != '\n') {
            end++;
        }
        Py_ssize_t inside = end - i - 1;
        if (end < length && ch == '"' && inside >= 2 && inside <= 60) {
            PyObject *value = PyUnicode_Substring(text, i + 1, end);
            if (value == NULL || PyList_Append(found, value) < 0) {
                Py_XDECREF(value);
                Py_DECREF(found);
                return NULL;
            }
            Py_DECREF(value);
            i = end;  /* the closing quote is taken: the next match starts after it */
        }
    }
    return found;
}

/* ``counts[key] = counts.get(key, 0) + n`` */
static int
add_count(PyObject *counts, PyObject *key, Py_ssize_t n)
{
    PyObject *old = PyDict_GetItemWithError(counts, key);
    if (old == NULL && PyErr_Occurred()) {
        return -1;
    }
    Py_ssize_t total = n;
    if (old != NULL) {
        Py_ssize_t before = PyLong_AsSsize_t(old);
        if (before == -1 && PyErr_Occurred()) {
            return -1;
        }
        total += before;
    }
    PyObject *value = PyLong_FromSsize_t(total);
    if (value == NULL) {
        return -1;
    }
    int failed = PyDict_SetItem(counts, key, value);
    Py_DECREF(value);
    return failed;
}

/* The distinct tokens of a text, in the order of first occurrence (as
   collections.Counter counts), each with its number of occurrences. A token
   repeats a lot in a text (JSON keys, common words): a repeat is found here by
   its characters, in an open-addressing table of spans, without making a string,
   hashing it with siphash and looking it up in a dict (most of what a token cost). */
typedef struct {
    Py_ssize_t start, length, count;
    Py_uhash_t hash;
} Span;

typedef struct {
    Span *spans;          /* in the order of first occurrence */
    Py_ssize_t n, spans_capacity;
    Py_ssize_t *slots;    /* index + 1 into spans; 0: empty */
    Py_ssize_t mask;      /* slots - 1, a power of two less one */
} Distinct;

static Py_uhash_t
span_hash(int kind, const void *data, Py_ssize_t start, Py_ssize_t end)
{
    Py_uhash_t h = 14695981039346656037ULL;  /* FNV-1a */
    for (Py_ssize_t i = start; i < end; i++) {
        h = (h ^ PyUnicode_READ(kind, data, i)) * 1099511628211ULL;
    }
    return h;
}

static int
distinct_grow(Distinct *d)
{
    Py_ssize_t size = (d->mask + 1) * 2;
    Py_ssize_t *slots = PyMem_Calloc(size, sizeof(Py_ssize_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < d->n; k++) {
        Py_ssize_t j = d->spans[k].hash & (size - 1);
        while (slots[j]) {
            j = (j + 1) & (size - 1);
        }
        slots[j] = k + 1;
    }
    PyMem_Free(d->slots);
    d->slots = slots;
    d->mask = size - 1;
    return 0;
}

/* Counts one occurrence of the token [start, end) of the text; -1 on an error. */
static int
distinct_add(Distinct *d, int kind, const void *data, Py_ssize_t start, Py_ssize_t end)
{
    Py_uhash_t hash = span_hash(kind, data, start, end);
    Py_ssize_t length = end - start;
    Py_ssize_t j = hash & d->mask;
    for (; d->slots[j]; j = (j + 1) & d->mask) {
        Span *s = &d->spans[d->slots[j] - 1];
        if (s->hash == hash && s->length == length
                && memcmp((const char *)data + s->start * kind, (const char *)data + start * kind,
                          (size_t)(length * kind)) == 0) {
            s->count++;
            return 0;
        }
    }
    if (d->n == d->spans_capacity) {
        Py_ssize_t capacity = d->spans_capacity * 2;
        Span *spans = PyMem_Realloc(d->spans, capacity * sizeof(Span));
        if (spans == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        d->spans = spans;
        d->spans_capacity = capacity;
    }
    d->spans[d->n] = (Span){start, length, 1, hash};
    d->slots[j] = ++d->n;
    return 2 * d->n > d->mask ? distinct_grow(d) : 0;  /* at most half full */
}

static void
distinct_free(Distinct *d)
{
    PyMem_Free(d->spans);
    PyMem_Free(d->slots);
}

/* The distinct tokens of ``text``; -1 on an error. */
static int
distinct_tokens(PyObject *text, Distinct *d)
{
    d->n = 0;
    d->spans_capacity = 64;
    d->mask = 127;
    d->spans = PyMem_Malloc(d->spans_capacity * sizeof(Span));
    d->slots = PyMem_Calloc(d->mask + 1, sizeof(Py_ssize_t));
    if (d->spans == NULL || d->slots == NULL) {
        distinct_free(d);
        PyErr_NoMemory();
        return -1;
    }
    Tokens t;
    tokens_start(&t, text);
    Py_ssize_t start, end;
    while (tokens_next_span(&t, &start, &end)) {
        if (distinct_add(d, t.kind, t.data, start, end) < 0) {
            distinct_free(d);
            return -1;
        }
    }
    return 0;
}

/* Adds one distinct token's (terms, entities, flags), seen ``n`` times. */
static int
add_token(PyObject *info, Py_ssize_t n, PyObject *counts, Py_ssize_t *length, PyObject *found, long *flags)
{
    if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) != 3
            || !PyTuple_Check(PyTuple_GET_ITEM(info, 0)) || !PyTuple_Check(PyTuple_GET_ITEM(info, 1))) {
        PyErr_SetString(PyExc_TypeError, "token_info[token] must be (terms tuple, entities tuple, flags int)");
        return -1;
    }
    PyObject *terms = PyTuple_GET_ITEM(info, 0);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(terms); i++) {
        if (add_count(counts, PyTuple_GET_ITEM(terms, i), n) < 0) {
            return -1;
        }
        *length += n;
    }
    PyObject *entities = PyTuple_GET_ITEM(info, 1);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(entities); i++) {
        if (PySet_Add(found, PyTuple_GET_ITEM(entities, i)) < 0) {
            return -1;
        }
    }
    long f = PyLong_AsLong(PyTuple_GET_ITEM(info, 2));
    if (f == -1 && PyErr_Occurred()) {
        return -1;
    }
    *flags |= f;
    return 0;
}

/* Plain tokens, read in C on their first sight: ASCII letters, digits and '_' (a word, a
   name, a number, an id, a snake_case name). Most distinct tokens of a conversation are
   such, and text_features._token_info (with _terms_of_word, stem and _entity_form) cost a
   few Python calls each: a twentieth of a cold prune. What they give is text_features's
   rule, restated here (tests/unit/pruning/test_token_scan.py holds the two equal), on the
   token in small letters: its terms (none for a stopword or a single character; its stem,
   and from four characters of stem on the prefix term "~" + stem[:4]); its constraint and
   error flags (``word_flags``); its entity, when it has three characters or more and is no
   stopword, if it holds a digit, is a name (a capital, then letters) or a snake_case name.
   A token with '#' or '-', or beyond ASCII, is left to the memo's __missing__. */
typedef struct {
    PyObject *stopwords;     /* a frozenset: words without terms */
    PyObject *word_flags;    /* a dict: word -> flags */
    Py_ssize_t max_entries;  /* the memo's bound (text_features._WordMemo) */
} PlainWords;

static int
ends_with(const Py_UCS1 *chars, Py_ssize_t length, const char *suffix)
{
    Py_ssize_t n = (Py_ssize_t)strlen(suffix);
    return length >= n && memcmp(chars + length - n, suffix, (size_t)n) == 0;
}

/* text_features.stem of a word in small letters: how many of its characters the stem
   keeps, and whether a 'y' follows them ("studies" -> "stud" + "y"). */
static Py_ssize_t
stem_length(const Py_UCS1 *chars, Py_ssize_t length, int *add_y)
{
    static const char *const suffixes[] = {"ingly", "ings", "ing", "edly", "ied", "ies", "ed", "es", "ly", "s"};
    *add_y = 0;
    Py_UCS1 last = chars[length - 1];
    /* (a number ends in a digit: stem's isdigit test is already passed here) */
    if (length <= 4 || (last != 's' && last != 'd' && last != 'g' && last != 'y')) {
        return length;
    }
    for (size_t k = 0; k < sizeof(suffixes) / sizeof(suffixes[0]); k++) {
        const char *suffix = suffixes[k];
        Py_ssize_t keep = (Py_ssize_t)strlen(suffix);
        if (ends_with(chars, length, suffix) && length - keep >= 3) {
            if (strcmp(suffix, "ied") == 0 || strcmp(suffix, "ies") == 0) {
                *add_y = 1;
                return length - keep;
            }
            if (strcmp(suffix, "s") == 0 && ends_with(chars, length, "ss")) {
                return length;
            }
            return length - keep;
        }
    }
    return length;
}

/* An ASCII string: ``prefix`` (0 for none), the ``length`` ``chars``, ``suffix`` (0 for none). */
static PyObject *
ascii_string(char prefix, const Py_UCS1 *chars, Py_ssize_t length, char suffix)
{
    PyObject *s = PyUnicode_New(length + (prefix != 0) + (suffix != 0), 127);
    if (s == NULL) {
        return NULL;
    }
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(s);
    if (prefix) {
        *out++ = (Py_UCS1)prefix;
    }
    memcpy(out, chars, (size_t)length);
    if (suffix) {
        out[length] = (Py_UCS1)suffix;
    }
    return s;
}

/* The terms of a word in small letters (text_features._terms_of_word); NULL on an error. */
static PyObject *
plain_terms(PyObject *word, int stopword)
{
    const Py_UCS1 *chars = PyUnicode_1BYTE_DATA(word);
    Py_ssize_t length = PyUnicode_GET_LENGTH(word);
    if (stopword || length < 2) {
        return PyTuple_New(0);
    }
    int add_y = 0;
    Py_ssize_t kept = stem_length(chars, length, &add_y);
    PyObject *stem = kept == length ? Py_NewRef(word) : ascii_string(0, chars, kept, add_y ? 'y' : 0);
    if (stem == NULL) {
        return NULL;
    }
    if (kept + add_y < 4) {
        PyObject *terms = PyTuple_Pack(1, stem);
        Py_DECREF(stem);
        return terms;
    }
    /* stem[:4]: a stem keeps three characters of the word at least, then its 'y' */
    PyObject *prefix = kept >= 4 ? ascii_string('~', chars, 4, 0) : ascii_string('~', chars, 3, 'y');
    if (prefix == NULL) {
        Py_DECREF(stem);
        return NULL;
    }
    PyObject *terms = PyTuple_Pack(2, stem, prefix);
    Py_DECREF(stem);
    Py_DECREF(prefix);
    return terms;
}

/* text_features._SNAKE.fullmatch of a token without digits: [a-z]+(_[a-z]+)+ */
static int
is_snake(const Py_UCS1 *chars, Py_ssize_t length)
{
    int underscores = 0;
    for (Py_ssize_t i = 0; i < length; i++) {
        Py_UCS1 ch = chars[i];
        if (ch == '_') {
            if (i == 0 || i == length - 1 || chars[i - 1] == '_') {
                return 0;
            }
            underscores++;
        }
        else if (ch < 'a' || ch > 'z') {
            return 0;
        }
    }
    return underscores > 0;
}

/* (terms, entities, flags) of a plain token, as text_features._token_info gives them; NULL
   without an exception for a token that is not plain, NULL with one on an error. */
static PyObject *
plain_info(PyObject *token, const PlainWords *plain)
{
    if (!PyUnicode_IS_ASCII(token)) {
        return NULL;
    }
    const Py_UCS1 *chars = PyUnicode_1BYTE_DATA(token);
    Py_ssize_t length = PyUnicode_GET_LENGTH(token);
    int digits = 0, capitals = 0, letters = 0, underscores = 0;
    for (Py_ssize_t i = 0; i < length; i++) {
        Py_UCS1 ch = chars[i];
        if (ch >= 'a' && ch <= 'z') {
            letters++;
        }
        else if (ch >= 'A' && ch <= 'Z') {
            capitals++;
        }
        else if (ch >= '0' && ch <= '9') {
            digits++;
        }
        else if (ch == '_') {
            underscores++;
        }
        else {
            return NULL;  /* '#' or '-' */
        }
    }
    if (length == 0) {
        return NULL;
    }
    PyObject *lowered;
    if (capitals == 0) {
        lowered = Py_NewRef(token);
    }
    else {
        lowered = PyUnicode_New(length, 127);
        if (lowered == NULL) {
            return NULL;
        }
        Py_UCS1 *out = PyUnicode_1BYTE_DATA(lowered);
        for (Py_ssize_t i = 0; i < length; i++) {
            out[i] = chars[i] >= 'A' && chars[i] <= 'Z' ? (Py_UCS1)(chars[i] + ('a' - 'A')) : chars[i];
        }
    }
    int stopword = PySet_Contains(plain->stopwords, lowered);
    PyObject *terms = stopword < 0 ? NULL : plain_terms(lowered, stopword);
    if (terms == NULL) {
        Py_DECREF(lowered);
        return NULL;
    }
    /* The entity: the whole token when it holds a digit (an id, a number), else a name
       (a capital, then letters) or a snake_case name; in small letters, from three
       characters on, not a stopword (text_features._entity_form). */
    int entity = length >= 3 && !stopword && (
        digits > 0
        || (chars[0] >= 'A' && chars[0] <= 'Z' && underscores == 0)
        || (underscores > 0 && is_snake(chars, length)));
    PyObject *entities = entity ? PyTuple_Pack(1, lowered) : PyTuple_New(0);
    PyObject *flags = PyDict_GetItemWithError(plain->word_flags, lowered);
    flags = flags != NULL ? Py_NewRef(flags) : PyErr_Occurred() ? NULL : PyLong_FromLong(0);
    Py_DECREF(lowered);
    if (entities == NULL || flags == NULL) {
        Py_DECREF(terms);
        Py_XDECREF(entities);
        Py_XDECREF(flags);
        return NULL;
    }
    return Py_BuildValue("(NNN)", terms, entities, flags);
}

PyDoc_STRVAR(scan_doc,
"scan(text, token_info, plain_words=None) -> (counts, length, entities, flags)\n\n"
"The tokens of ``text`` read through ``token_info`` (token -> (terms, entities,\n"
"flags); a dict, whose ``__missing__`` is called for a token it lacks): each\n"
"term's occurrences, their sum, the set of entities, the flags or-ed. With\n"
"``plain_words`` (stopwords frozenset, word flags dict, the memo's bound), a plain\n"
"word or number it lacks is read in C and stored, while the memo is under its bound.");

static PyObject *
scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || nargs > 3 || !PyUnicode_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "scan() takes a str, a dict and optionally the plain words");
        return NULL;
    }
    PyObject *text = args[0], *token_info = args[1];
    PlainWords plain = {NULL, NULL, 0};
    if (nargs == 3 && args[2] != Py_None) {
        if (!PyArg_ParseTuple(args[2], "O!O!n;plain_words must be (frozenset, dict, int)",
                              &PyFrozenSet_Type, &plain.stopwords, &PyDict_Type, &plain.word_flags,
                              &plain.max_entries)) {
            return NULL;
        }
    }
    Distinct distinct;
    if (distinct_tokens(text, &distinct) < 0) {
        return NULL;
    }
    PyObject *counts = PyDict_New();
    PyObject *found = PySet_New(NULL);
    Py_ssize_t length = 0;
    long flags = 0;
    if (counts == NULL || found == NULL) {
        goto error;
    }
    for (Py_ssize_t k = 0; k < distinct.n; k++) {
        Span *span = &distinct.spans[k];
        PyObject *token = PyUnicode_Substring(text, span->start, span->start + span->length);
        if (token == NULL) {
            goto error;
        }
        /* The memo's own item, or its __missing__ (Python: computes and stores it). */
        PyObject *info = PyDict_GetItemWithError(token_info, token);
        if (info != NULL) {
            Py_INCREF(info);
        }
        else if (!PyErr_Occurred()) {
            info = plain.stopwords != NULL ? plain_info(token, &plain) : NULL;
            if (info != NULL) {
                if (PyDict_GET_SIZE(token_info) < plain.max_entries
                        && PyDict_SetItem(token_info, token, info) < 0) {
                    Py_CLEAR(info);
                }
            }
            else if (!PyErr_Occurred()) {
                info = PyObject_GetItem(token_info, token);
            }
        }
        Py_DECREF(token);
        if (info == NULL) {
            goto error;
        }
        int failed = add_token(info, span->count, counts, &length, found, &flags);
        Py_DECREF(info);
        if (failed) {
            goto error;
        }
    }
    distinct_free(&distinct);
    return Py_BuildValue("(NnNl)", counts, length, found, flags);

error:
    distinct_free(&distinct);
    Py_XDECREF(counts);
    Py_XDECREF(found);
    return NULL;
}

/* text_features._entity_form of an ASCII string: in small letters; None under three
   characters or for a stopword; a tag's '#'s stripped from four characters on. NULL
   without an exception for a string beyond ASCII (left to the memo's __missing__), NULL
   with one on an error. */
static PyObject *
ascii_entity_form(PyObject *string, PyObject *stopwords)
{
    if (!PyUnicode_IS_ASCII(string)) {
        return NULL;
    }
    const Py_UCS1 *chars = PyUnicode_1BYTE_DATA(string);
    Py_ssize_t length = PyUnicode_GET_LENGTH(string);
    if (length < 3) {
        return Py_NewRef(Py_None);
    }
    PyObject *lowered = NULL;
    for (Py_ssize_t i = 0; i < length && lowered == NULL; i++) {
        if (chars[i] >= 'A' && chars[i] <= 'Z') {
            lowered = PyUnicode_New(length, 127);
            if (lowered == NULL) {
                return NULL;
            }
            Py_UCS1 *out = PyUnicode_1BYTE_DATA(lowered);
            for (Py_ssize_t k = 0; k < length; k++) {
                out[k] = chars[k] >= 'A' && chars[k] <= 'Z' ? (Py_UCS1)(chars[k] + ('a' - 'A')) : chars[k];
            }
        }
    }
    if (lowered == NULL) {
        lowered = Py_NewRef(string);
    }
    int stopword = PySet_Contains(stopwords, lowered);
    if (stopword != 0) {
        Py_DECREF(lowered);
        return stopword < 0 ? NULL : Py_NewRef(Py_None);
    }
    if (chars[0] == '#' && length > 3) {
        Py_ssize_t tag = 0;
        while (tag < length && chars[tag] == '#') {
            tag++;
        }
        PyObject *stripped = PyUnicode_Substring(lowered, tag, length);
        Py_DECREF(lowered);
        return stripped;
    }
    return lowered;
}

PyDoc_STRVAR(entity_forms_doc,
"entity_forms(strings, memo, stopwords, max_entries) -> list\n\n"
"``[memo[s] for s in strings]``, an ASCII string the memo lacks read in C as\n"
"text_features._entity_form reads it (stored while the memo holds fewer than\n"
"``max_entries``); any other through the memo's ``__missing__``.");

static PyObject *
entity_forms(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_Check(args[1]) || !PyFrozenSet_Check(args[2]) || !PyLong_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "entity_forms() takes strings, a dict, a frozenset and an int");
        return NULL;
    }
    PyObject *memo = args[1], *stopwords = args[2];
    Py_ssize_t max_entries = PyLong_AsSsize_t(args[3]);
    if (max_entries == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *strings = PySequence_Fast(args[0], "entity_forms() takes a sequence of strings");
    if (strings == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(strings);
    PyObject *forms = PyList_New(n);
    if (forms == NULL) {
        Py_DECREF(strings);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *string = PySequence_Fast_GET_ITEM(strings, k);
        PyObject *form = PyDict_GetItemWithError(memo, string);
        if (form != NULL) {
            Py_INCREF(form);
        }
        else if (!PyErr_Occurred()) {
            form = PyUnicode_Check(string) ? ascii_entity_form(string, stopwords) : NULL;
            if (form != NULL) {
                if (PyDict_GET_SIZE(memo) < max_entries && PyDict_SetItem(memo, string, form) < 0) {
                    Py_CLEAR(form);
                }
            }
            else if (!PyErr_Occurred()) {
                form = PyObject_GetItem(memo, string);
            }
        }
        if (form == NULL) {
            Py_DECREF(forms);
            Py_DECREF(strings);
            return NULL;
        }
        PyList_SET_ITEM(forms, k, form);
    }
    Py_DECREF(strings);
    return forms;
}

static PyMethodDef methods[] = {
    {"tokens", (PyCFunction)tokens, METH_O, tokens_doc},
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL, scan_doc},
    {"quoted", (PyCFunction)quoted, METH_O, quoted_doc},
    {"entity_forms", (PyCFunction)(void (*)(void))entity_forms, METH_FASTCALL, entity_forms_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gateway.pruning._token_scan",
    .m_doc = "The token loop of text_features.analyse, in C (token_scan.py is the same in Python).",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__token_scan(void)
{
    return PyModuleDef_Init(&module);
}
