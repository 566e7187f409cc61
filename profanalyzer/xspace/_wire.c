/*
 * profanalyzer.xspace._wire: one-pass decoder of a run of XLine.events.
 *
 * Optional accelerator for profanalyzer/xspace/wire.py (which has a pure
 * numpy implementation of the same contract). Walks the protobuf wire bytes
 * of consecutive XLine.events fields (field 4, length-delimited) and returns
 * columns: metadata_id, offset_ps, duration_ps per event, and per integer
 * stat (XEvent.stats): event index, stat metadata id, value, is-ref flag.
 * An optional buffer of int64 stat metadata ids keeps only those stats (the
 * others cost memory and time: real events carry many).
 * String/bytes stat values are skipped; double values are truncated to
 * integers. Any malformed byte makes it return None (the caller then lets
 * the protobuf runtime decode the line and report the corruption).
 *
 * Written for profanalyzer from the field numbers in the project's own
 * xplane.proto.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t *data;
    Py_ssize_t len, cap;
} vec;

static int vec_grow(vec *v) {
    {
        Py_ssize_t cap = v->cap ? v->cap * 2 : 1024;
        int64_t *d = (int64_t *)realloc(v->data, (size_t)cap * sizeof(int64_t));
        if (!d) return -1;
        v->data = d;
        v->cap = cap;
    }
    return 0;
}

static inline int vec_push(vec *v, int64_t x) {
    if (__builtin_expect(v->len == v->cap, 0) && vec_grow(v)) return -1;
    v->data[v->len++] = x;
    return 0;
}

/* Read a varint; returns 0 on success, -1 when truncated or too long. */
static inline int rd(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out) {
    if (__builtin_expect(*pos < end && b[*pos] < 0x80, 1)) { *out = b[(*pos)++]; return 0; }
    uint64_t r = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    while (1) {
        if (p >= end || shift > 63) return -1;
        uint8_t c = b[p++];
        r |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) break;
        shift += 7;
    }
    *pos = p;
    *out = r;
    return 0;
}

static int skip(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, int wire) {
    uint64_t n;
    switch (wire) {
    case 0: return rd(b, pos, end, &n);
    case 1: if (*pos + 8 > end) return -1; *pos += 8; return 0;
    case 5: if (*pos + 4 > end) return -1; *pos += 4; return 0;
    case 2:
        if (rd(b, pos, end, &n)) return -1;
        if (n > (uint64_t)(end - *pos)) return -1;
        *pos += (Py_ssize_t)n;
        return 0;
    default: return -1;
    }
}

static PyObject *as_bytearray(vec *v) {
    return PyByteArray_FromStringAndSize((const char *)v->data, v->len * (Py_ssize_t)sizeof(int64_t));
}

static PyObject *decode_event_run(PyObject *self, PyObject *args) {
    Py_buffer view, wview = {0};
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "y*nn|y*", &view, &start, &end, &wview)) return NULL;
    const int64_t *want = (const int64_t *)wview.buf;
    Py_ssize_t nwant = wview.buf ? wview.len / (Py_ssize_t)sizeof(int64_t) : -1;
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        if (wview.buf) PyBuffer_Release(&wview);
        Py_RETURN_NONE;
    }
    const uint8_t *b = (const uint8_t *)view.buf;
    vec mid = {0}, off = {0}, dur = {0}, s_ev = {0}, s_id = {0}, s_val = {0}, s_ref = {0};
    Py_ssize_t pos = start, stop = end;
    int bad = 0, oom = 0;
    int64_t nev = 0;
    /* The walk touches only the (pinned) buffer and malloc'd vectors: let
       other threads run meanwhile. */
    Py_BEGIN_ALLOW_THREADS
    while (pos < end) {
        Py_ssize_t tag_pos = pos;
        uint64_t key, len;
        if (rd(b, &pos, end, &key)) { bad = 1; break; }
        if ((key >> 3) != 4 || (key & 7) != 2) { stop = tag_pos; break; }
        if (rd(b, &pos, end, &len) || len > (uint64_t)(end - pos)) { bad = 1; break; }
        Py_ssize_t ev_end = pos + (Py_ssize_t)len;
        int64_t m = 0, o = 0, d = 0;
        while (pos < ev_end && !bad) {
            uint64_t k, v;
            if (rd(b, &pos, ev_end, &k)) { bad = 1; break; }
            int f = (int)(k >> 3), w = (int)(k & 7);
            if (f == 0) { bad = 1; break; }
            if (w == 0) {
                if (rd(b, &pos, ev_end, &v)) { bad = 1; break; }
                if (f == 1) m = (int64_t)v;
                else if (f == 2) o = (int64_t)v;
                else if (f == 3) d = (int64_t)v;
            } else if (w == 2 && f == 4) {
                uint64_t slen;
                if (rd(b, &pos, ev_end, &slen) || slen > (uint64_t)(ev_end - pos)) { bad = 1; break; }
                Py_ssize_t s_end = pos + (Py_ssize_t)slen;
                int64_t sid = 0, sval = 0;
                int has = 0, ref = 0;
                while (pos < s_end) {
                    uint64_t sk, sv;
                    if (rd(b, &pos, s_end, &sk)) { bad = 1; break; }
                    int sf = (int)(sk >> 3), sw = (int)(sk & 7);
                    if (sf == 0) { bad = 1; break; }
                    if (sw == 0) {
                        if (rd(b, &pos, s_end, &sv)) { bad = 1; break; }
                        if (sf == 1) sid = (int64_t)sv;
                        else if (sf == 3 || sf == 4) { sval = (int64_t)sv; has = 1; ref = 0; }
                        else if (sf == 7) { sval = (int64_t)sv; has = 1; ref = 1; }
                    } else if (sw == 1 && sf == 2) {
                        double x;
                        if (pos + 8 > s_end) { bad = 1; break; }
                        memcpy(&x, b + pos, 8);
                        pos += 8;
                        if (x == x && x > -9.2e18 && x < 9.2e18) { sval = (int64_t)x; has = 1; ref = 0; }
                    } else if (skip(b, &pos, s_end, sw)) { bad = 1; break; }
                }
                if (bad || pos != s_end) { bad = 1; break; }
                if (has && nwant >= 0) {
                    Py_ssize_t i = 0;
                    while (i < nwant && want[i] != sid) i++;
                    has = i < nwant;
                }
                if (has) {
                    if (vec_push(&s_ev, nev) || vec_push(&s_id, sid) || vec_push(&s_val, sval) || vec_push(&s_ref, ref)) { oom = 1; break; }
                }
            } else if (skip(b, &pos, ev_end, w)) { bad = 1; break; }
        }
        if (bad || oom || pos != ev_end) { bad = 1; break; }
        if (vec_push(&mid, m) || vec_push(&off, o) || vec_push(&dur, d)) { oom = 1; break; }
        nev++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (wview.buf) PyBuffer_Release(&wview);
    PyObject *res = NULL;
    if (oom) {
        PyErr_NoMemory();
    } else if (bad || nev == 0) {
        Py_INCREF(Py_None);
        res = Py_None;
    } else {
        res = Py_BuildValue("(NNNNNNNn)", as_bytearray(&mid), as_bytearray(&off), as_bytearray(&dur),
                            as_bytearray(&s_ev), as_bytearray(&s_id), as_bytearray(&s_val), as_bytearray(&s_ref), stop);
    }
    free(mid.data); free(off.data); free(dur.data);
    free(s_ev.data); free(s_id.data); free(s_val.data); free(s_ref.data);
    return res;
}

static PyMethodDef methods[] = {
    {"decode_event_run", decode_event_run, METH_VARARGS,
     "decode_event_run(buf, start, end[, want]) -> (mid, off, dur, stat_event, stat_id, stat_value, stat_is_ref, stop) "
     "(want: int64 stat metadata ids to keep; default all) "
     "as int64 bytearrays, or None when the bytes are not a well-formed run of XLine events."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wire", "One-pass XLine events decoder.", -1, methods};

PyMODINIT_FUNC PyInit__wire(void) { return PyModule_Create(&module); }
