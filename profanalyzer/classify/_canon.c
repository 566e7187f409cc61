/*
 * profanalyzer.classify._canon: op identities with their instruction
 * numbers erased, for grouping op families (classify_columns).
 *
 * Optional accelerator: profanalyzer/classify/__init__.py does the same with
 * one regular expression (\.[0-9]+ -> .0) when this module is not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* erase_numbers(texts): a list with every "." followed by ASCII digits in each
   str written ".0"; None for an item that is not an ASCII str (the caller
   uses the regular expression for it). */
static PyObject *erase_numbers(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "erase_numbers() takes a sequence of str");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyList_New(n);
    char *buf = NULL;
    Py_ssize_t cap = 0;
    if (!out) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = items[i];
        if (!PyUnicode_Check(s) || !PyUnicode_IS_ASCII(s)) {
            Py_INCREF(Py_None);
            PyList_SET_ITEM(out, i, Py_None);
            continue;
        }
        Py_ssize_t len = PyUnicode_GET_LENGTH(s);
        const char *src = (const char *)PyUnicode_1BYTE_DATA(s);
        const char *dot = memchr(src, '.', (size_t)len);
        if (!dot) {
            Py_INCREF(s);
            PyList_SET_ITEM(out, i, s);
            continue;
        }
        if (len > cap) {
            char *nb = (char *)realloc(buf, (size_t)len + 1);
            if (!nb) { PyErr_NoMemory(); goto fail; }
            buf = nb;
            cap = len;
        }
        Py_ssize_t j = 0, k = 0;
        while (j < len) {
            char c = src[j];
            if (c == '.' && j + 1 < len && src[j + 1] >= '0' && src[j + 1] <= '9') {
                buf[k++] = '.';
                buf[k++] = '0';
                j += 2;
                while (j < len && src[j] >= '0' && src[j] <= '9') j++;
            } else {
                buf[k++] = c;
                j++;
            }
        }
        PyObject *r = PyUnicode_FromStringAndSize(buf, k);
        if (!r) goto fail;
        PyList_SET_ITEM(out, i, r);
    }
    free(buf);
    Py_DECREF(seq);
    return out;
fail:
    free(buf);
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

/* clean_texts(texts, cap): whether every item is an exact str of at most
   `cap` characters holding no NUL (then as_text leaves each as it is). */
static PyObject *clean_texts(PyObject *self, PyObject *args) {
    PyObject *arg;
    Py_ssize_t cap;
    if (!PyArg_ParseTuple(args, "On", &arg, &cap)) return NULL;
    PyObject *seq = PySequence_Fast(arg, "clean_texts() takes a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int ok = 1;
    for (Py_ssize_t i = 0; i < n && ok; i++) {
        PyObject *s = items[i];
        if (!PyUnicode_CheckExact(s) || PyUnicode_READY(s) < 0) {
            PyErr_Clear();
            ok = 0;
            break;
        }
        Py_ssize_t len = PyUnicode_GET_LENGTH(s);
        if (len > cap) {
            ok = 0;
            break;
        }
        int kind = PyUnicode_KIND(s);
        const void *data = PyUnicode_DATA(s);
        if (kind == PyUnicode_1BYTE_KIND) {
            ok = memchr(data, 0, (size_t)len) == NULL;
        } else {
            for (Py_ssize_t j = 0; j < len; j++) {
                if (PyUnicode_READ(kind, data, j) == 0) {
                    ok = 0;
                    break;
                }
            }
        }
    }
    Py_DECREF(seq);
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"clean_texts", clean_texts, METH_VARARGS,
     "clean_texts(texts, cap) -> bool: every item is an exact str of at most cap characters without NUL."},
    {"erase_numbers", erase_numbers, METH_O,
     "erase_numbers(texts) -> list: each ASCII str with every '.' + digits written '.0' (None for other items)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_canon", "Op identities with instruction numbers erased.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__canon(void) { return PyModule_Create(&module); }
