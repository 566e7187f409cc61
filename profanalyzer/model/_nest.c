/*
 * profanalyzer.model._nest: the nesting of one line's events (parent, depth, end
 * clipped to the parent, self time), in one pass per nesting level.
 *
 * Optional accelerator: profanalyzer/trace.py computes the same with numpy
 * (`nesting`, then the self times) when this module is not built, and tests
 * hold the two equal. The algorithm is numpy's, step for step, so that
 * partial overlaps (invalid input) resolve the same way:
 *   level by level over the events not placed yet (in order), an event is at
 *   the current level when its start is >= the running maximum of the ends
 *   of the earlier unplaced events (ends as they were before this level's
 *   clipping); its parent is the last event of the previous level whose
 *   start is <= its own (the first of that level when none is), and its end
 *   becomes max(min(end, parent's end), start).
 * Self time: duration minus the durations of the direct children, summed in
 * float64 in index order (as numpy's weighted bincount), truncated to an
 * integer and floored at 0; the duration itself when no event has a parent.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* nest(start, end, max_depth): (parent int64, depth int16, end int64, self
   int64) as bytearrays, for events sorted by start; None when the starts are not
   sorted or a level beyond max_depth is needed (the caller then runs the
   numpy version, which falls back to its stack walk). */
static PyObject *nest(PyObject *self, PyObject *args) {
    Py_buffer sv, ev;
    int max_depth;
    if (!PyArg_ParseTuple(args, "y*y*i", &sv, &ev, &max_depth)) return NULL;
    PyObject *res = NULL;
    if (sv.len != ev.len || sv.len % 8) {
        PyErr_SetString(PyExc_ValueError, "start and end must be int64 buffers of one length");
        goto release;
    }
    Py_ssize_t n = sv.len / 8;
    const int64_t *start = (const int64_t *)sv.buf;
    PyObject *o_parent = PyByteArray_FromStringAndSize(NULL, n * 8);
    PyObject *o_depth = PyByteArray_FromStringAndSize(NULL, n * 2);
    PyObject *o_end = PyByteArray_FromStringAndSize(NULL, n * 8);
    PyObject *o_self = PyByteArray_FromStringAndSize(NULL, n * 8);
    int64_t *rem = (int64_t *)malloc((size_t)(n ? n : 1) * 8);
    int64_t *next = (int64_t *)malloc((size_t)(n ? n : 1) * 8);
    int64_t *lvl = (int64_t *)malloc((size_t)(n ? n : 1) * 8);
    int64_t *prev = (int64_t *)malloc((size_t)(n ? n : 1) * 8);
    double *acc = (double *)calloc((size_t)(n ? n : 1), sizeof(double));
    int ok = 1, oom = !o_parent || !o_depth || !o_end || !o_self || !rem || !next || !lvl || !prev || !acc;
    if (!oom) {
        int64_t *parent = (int64_t *)PyByteArray_AS_STRING(o_parent);
        int16_t *depth = (int16_t *)PyByteArray_AS_STRING(o_depth);
        int64_t *end = (int64_t *)PyByteArray_AS_STRING(o_end);
        int64_t *selft = (int64_t *)PyByteArray_AS_STRING(o_self);
        Py_BEGIN_ALLOW_THREADS
        memcpy(end, ev.buf, (size_t)n * 8);
        for (Py_ssize_t i = 0; i < n; i++) {
            parent[i] = -1;
            depth[i] = 0;
            rem[i] = i;
            if (i && start[i] < start[i - 1]) ok = 0;
        }
        Py_ssize_t nrem = ok ? n : 0, nprev = 0;
        int level = 0;
        while (nrem > 0) {
            if (level > max_depth) { ok = 0; break; }
            Py_ssize_t nl = 0, nn = 0;
            int64_t pm = INT64_MIN;
            for (Py_ssize_t k = 0; k < nrem; k++) {
                int64_t i = rem[k];
                int64_t e = end[i];
                if (start[i] >= pm) lvl[nl++] = i;
                else next[nn++] = i;
                if (e > pm) pm = e;
            }
            if (level > 0) {
                Py_ssize_t c = 0;  /* events of the previous level starting at or before s */
                for (Py_ssize_t k = 0; k < nl; k++) {
                    int64_t i = lvl[k], s = start[i];
                    while (c < nprev && start[prev[c]] <= s) c++;
                    int64_t p = prev[c > 0 ? c - 1 : 0];
                    parent[i] = p;
                    depth[i] = (int16_t)level;
                    int64_t e = end[i] < end[p] ? end[i] : end[p];
                    end[i] = e > s ? e : s;
                }
            }
            int64_t *t = prev; prev = lvl; lvl = t;
            nprev = nl;
            t = rem; rem = next; next = t;
            nrem = nn;
            level++;
        }
        if (ok) {
            int any = 0;
            for (Py_ssize_t i = 0; i < n; i++) {
                if (parent[i] >= 0) {
                    acc[parent[i]] += (double)(end[i] - start[i]);
                    any = 1;
                }
            }
            for (Py_ssize_t i = 0; i < n; i++) {
                int64_t d = end[i] - start[i];
                if (any) {
                    d -= (int64_t)acc[i];
                    if (d < 0) d = 0;
                }
                selft[i] = d;
            }
        }
        Py_END_ALLOW_THREADS
    }
    if (oom) {
        PyErr_NoMemory();
    } else if (!ok) {
        Py_INCREF(Py_None);
        res = Py_None;
    } else {
        res = PyTuple_Pack(4, o_parent, o_depth, o_end, o_self);
    }
    Py_XDECREF(o_parent);
    Py_XDECREF(o_depth);
    Py_XDECREF(o_end);
    Py_XDECREF(o_self);
    free(rem);
    free(next);
    free(lvl);
    free(prev);
    free(acc);
release:
    PyBuffer_Release(&sv);
    PyBuffer_Release(&ev);
    return res;
}

static PyMethodDef methods[] = {
    {"nest", nest, METH_VARARGS,
     "nest(start, end, max_depth) -> (parent, depth, end, self) as int64/int16/int64/int64 bytearrays, or None."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nest", "The nesting of a line's events.", -1, methods};

PyMODINIT_FUNC PyInit__nest(void) { return PyModule_Create(&module); }
