/*
 * profanalyzer._windows: the exclusive time of a line's events per (window,
 * label), for several labellings in one pass over the events.
 *
 * Optional accelerator: profanalyzer/attribution.py (OpTimeline.exclusive_many)
 * computes the same with numpy when this module is not built, and tests
 * hold the two equal. The sums are numpy's, operation for operation: for
 * each window in order and each event of its index range in order, the
 * event's duration clipped to the window (floored at 0) is added, in
 * float64, to its label's bin of one array and, when the event has a parent,
 * to the parent's label's bin of a second array (numpy's two weighted
 * bincounts); the result is rint(first - second) as int64.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SETS 8

/* window_sums(start, end, parent, lo, hi, wa, wb, labels, sizes[, total]):
   a tuple with, per labelling k, an int64 bytearray of len(wa) * sizes[k]
   sums (window-major); with `total`, of sizes[k] sums: each label's
   per-window sums (as above) added over the windows, without the window x
   label matrix. start/end/parent/labels are per event, lo/hi/wa/wb per
   window, all int64 buffers; labels[k][i] in [0, sizes[k]). None when an
   index is out of range (the caller then runs numpy). */
static PyObject *window_sums(PyObject *self, PyObject *args) {
    Py_buffer sv, ev, pv, lov, hiv, wav, wbv;
    PyObject *labels, *sizes;
    int total = 0;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*O!O!|p", &sv, &ev, &pv, &lov, &hiv, &wav, &wbv, &PyTuple_Type, &labels,
                          &PyTuple_Type, &sizes, &total))
        return NULL;
    PyObject *res = NULL;
    Py_buffer lb[MAX_SETS];
    int nlb = 0;
    double *acc[MAX_SETS] = {0}, *sub[MAX_SETS] = {0};
    int64_t *tot[MAX_SETS] = {0}, *touched[MAX_SETS] = {0};
    char *seen[MAX_SETS] = {0};
    Py_ssize_t nsets = PyTuple_GET_SIZE(labels), n = sv.len / 8, nw = wav.len / 8;
    Py_ssize_t size[MAX_SETS];
    if (nsets != PyTuple_GET_SIZE(sizes) || nsets > MAX_SETS || ev.len != sv.len || pv.len != sv.len ||
        lov.len != wav.len || hiv.len != wav.len || wbv.len != wav.len) {
        PyErr_SetString(PyExc_ValueError, "window_sums: mismatched arguments");
        goto release;
    }
    for (Py_ssize_t k = 0; k < nsets; k++) {
        size[k] = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, k));
        if (size[k] < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "window_sums: negative size");
            goto release;
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(labels, k), &lb[k], PyBUF_SIMPLE) < 0) goto release;
        nlb++;
        if (lb[k].len != sv.len) {
            PyErr_SetString(PyExc_ValueError, "window_sums: a labelling of another length");
            goto release;
        }
        /* total: one window's sums at a time (scratch of one row, the
           labels it touched), added into the totals at the window's end */
        Py_ssize_t rows = total ? 1 : nw;
        acc[k] = (double *)calloc((size_t)(rows * size[k] + 1), sizeof(double));
        sub[k] = (double *)calloc((size_t)(rows * size[k] + 1), sizeof(double));
        if (total) {
            tot[k] = (int64_t *)calloc((size_t)(size[k] + 1), sizeof(int64_t));
            touched[k] = (int64_t *)malloc((size_t)(size[k] + 1) * sizeof(int64_t));
            seen[k] = (char *)calloc((size_t)(size[k] + 1), 1);
        }
        if (!acc[k] || !sub[k] || (total && (!tot[k] || !touched[k] || !seen[k]))) {
            PyErr_NoMemory();
            goto release;
        }
    }
    {
        const int64_t *start = (const int64_t *)sv.buf, *end = (const int64_t *)ev.buf, *parent = (const int64_t *)pv.buf;
        const int64_t *lo = (const int64_t *)lov.buf, *hi = (const int64_t *)hiv.buf;
        const int64_t *wa = (const int64_t *)wav.buf, *wb = (const int64_t *)wbv.buf;
        int ok = 1;
        Py_BEGIN_ALLOW_THREADS
        /* numpy adds every entry to the first array, then the entries with a
           parent to the second: each array's additions keep that order. */
        Py_ssize_t ntouched[MAX_SETS] = {0};
        for (Py_ssize_t w = 0; w < nw && ok; w++) {
            if (lo[w] < 0 || hi[w] > n || lo[w] > hi[w]) { ok = 0; break; }
            Py_ssize_t row = total ? 0 : w;
            for (int64_t i = lo[w]; i < hi[w]; i++) {
                int64_t a = start[i] > wa[w] ? start[i] : wa[w];
                int64_t b = end[i] < wb[w] ? end[i] : wb[w];
                int64_t d = b - a;
                if (d < 0) d = 0;
                int64_t p = parent[i];
                if (p >= n) { ok = 0; break; }
                for (Py_ssize_t k = 0; k < nsets; k++) {
                    const int64_t *lab = (const int64_t *)lb[k].buf;
                    int64_t l = lab[i];
                    if (l < 0 || l >= size[k]) { ok = 0; break; }
                    acc[k][row * size[k] + l] += (double)d;
                    if (total && !seen[k][l]) { seen[k][l] = 1; touched[k][ntouched[k]++] = l; }
                    if (p >= 0) {
                        int64_t q = lab[p];
                        if (q < 0 || q >= size[k]) { ok = 0; break; }
                        sub[k][row * size[k] + q] += (double)d;
                        if (total && !seen[k][q]) { seen[k][q] = 1; touched[k][ntouched[k]++] = q; }
                    }
                }
                if (!ok) break;
            }
            if (total && ok) {
                for (Py_ssize_t k = 0; k < nsets; k++) {
                    for (Py_ssize_t t = 0; t < ntouched[k]; t++) {
                        int64_t l = touched[k][t];
                        tot[k][l] += (int64_t)rint(acc[k][l] - sub[k][l]);
                        acc[k][l] = 0.0;
                        sub[k][l] = 0.0;
                        seen[k][l] = 0;
                    }
                    ntouched[k] = 0;
                }
            }
        }
        Py_END_ALLOW_THREADS
        if (!ok) {
            Py_INCREF(Py_None);
            res = Py_None;
            goto release;
        }
    }
    res = PyTuple_New(nsets);
    if (!res) goto release;
    for (Py_ssize_t k = 0; k < nsets; k++) {
        Py_ssize_t m = total ? size[k] : nw * size[k];
        PyObject *out = PyByteArray_FromStringAndSize(NULL, m * 8);
        if (!out) {
            Py_CLEAR(res);
            goto release;
        }
        int64_t *o = (int64_t *)PyByteArray_AS_STRING(out);
        if (total) {
            if (m) memcpy(o, tot[k], (size_t)m * 8);
        } else {
            for (Py_ssize_t j = 0; j < m; j++) o[j] = (int64_t)rint(acc[k][j] - sub[k][j]);
        }
        PyTuple_SET_ITEM(res, k, out);
    }
release:
    for (int k = 0; k < nlb; k++) PyBuffer_Release(&lb[k]);
    for (int k = 0; k < MAX_SETS; k++) {
        free(acc[k]);
        free(sub[k]);
        free(tot[k]);
        free(touched[k]);
        free(seen[k]);
    }
    PyBuffer_Release(&sv);
    PyBuffer_Release(&ev);
    PyBuffer_Release(&pv);
    PyBuffer_Release(&lov);
    PyBuffer_Release(&hiv);
    PyBuffer_Release(&wav);
    PyBuffer_Release(&wbv);
    return res;
}

static PyMethodDef methods[] = {
    {"window_sums", window_sums, METH_VARARGS,
     "window_sums(start, end, parent, lo, hi, wa, wb, labels, sizes[, total]) -> tuple of int64 bytearrays, or None."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_windows", "Exclusive time per window and label.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__windows(void) { return PyModule_Create(&module); }
