/* profanalyzer.read.xspace._wire: one-pass decoders of XSpace wire bytes: a run of XLine.events
 * (decode_event_run), a message's top-level fields (scan_fields) and XPlane.event_metadata map entries
 * (decode_metadata). Optional accelerator for profanalyzer/read/xspace/wire.py (which has a pure numpy
 * implementation of the same contract). Walks the protobuf wire bytes of consecutive XLine.events fields
 * (field 4, length-delimited) and returns columns: metadata_id, offset_ps, duration_ps per event, and per
 * integer stat (XEvent.stats): event index, stat metadata id, value, is-ref flag. An optional buffer of int64
 * stat metadata ids keeps only those stats (the others cost memory and time: real events carry many).
 * String/bytes stat values are skipped; double values are truncated to integers. Any malformed byte makes
 * it return None (the caller then lets the protobuf runtime decode the line and report the corruption).
 * Written for profanalyzer from the field numbers in the project's own xplane.proto. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int64_t *data; Py_ssize_t len, cap; } vec;

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

/* A tuple of int64 bytearrays holding the n columns: allocated with the GIL,
   filled without it (the copy, and the page faults of fresh memory, are
   most of the cost on large columns), then `extra` (stolen; may be NULL)
   appended. NULL with MemoryError. */
static PyObject *bytearrays_tuple(vec *cols, int n, PyObject *extra) {
    char *dst[16];
    if (n > 16) {
        PyErr_SetString(PyExc_SystemError, "bytearrays_tuple: too many columns");
        Py_XDECREF(extra);
        return NULL;
    }
    PyObject *res = PyTuple_New(n + (extra ? 1 : 0));
    if (!res) { Py_XDECREF(extra); return NULL; }
    for (int i = 0; i < n; i++) {
        PyObject *b = PyByteArray_FromStringAndSize(NULL, cols[i].len * (Py_ssize_t)sizeof(int64_t));
        if (!b) { Py_DECREF(res); Py_XDECREF(extra); return NULL; }
        dst[i] = PyByteArray_AS_STRING(b);
        PyTuple_SET_ITEM(res, i, b);
    }
    if (extra) PyTuple_SET_ITEM(res, n, extra);
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < n; i++)
        if (cols[i].len) memcpy(dst[i], cols[i].data, (size_t)cols[i].len * sizeof(int64_t));
    Py_END_ALLOW_THREADS
    return res;
}

/* What scan_fields and decode_metadata return: MemoryError (oom), None (bad
   bytes: the caller falls back to the protobuf runtime) or a tuple of the
   columns as int64 bytearrays. Frees the columns. */
static PyObject *columns_result(int oom, int bad, vec *cols, int ncols) {
    PyObject *res = NULL;
    if (oom) {
        PyErr_NoMemory();
    } else if (bad) {
        Py_INCREF(Py_None);
        res = Py_None;
    } else {
        res = bytearrays_tuple(cols, ncols, NULL);
    }
    for (int i = 0; i < ncols; i++) free(cols[i].data);
    return res;
}

/* decode_event_run(buf, start, end[, want[, dense]]): the run of XLine.events
   fields at buf[start:end]. Returns (metadata_id, offset_ps, duration_ps,
   stat_event, stat_id, stat_value, stat_is_ref, stop) as int64 bytearrays
   and the stop offset, or None on malformed bytes. `want`: the sorted int64
   stat metadata ids to keep (default: every integer stat). `dense` (with
   `want`): the stats come instead as one more item, a tuple with per wanted
   id a column of its value for every event (-1 where the event has none; the
   last value of an event wins; ref values are not values) or None when no
   event has one, and the four stat columns are empty. */
static PyObject *decode_event_run(PyObject *self, PyObject *args) {
    Py_buffer view, wview = {0};
    Py_ssize_t start, end;
    int dense = 0;
    if (!PyArg_ParseTuple(args, "y*nn|y*p", &view, &start, &end, &wview, &dense)) return NULL;
    const int64_t *want = (const int64_t *)wview.buf;
    Py_ssize_t nwant = wview.buf ? wview.len / (Py_ssize_t)sizeof(int64_t) : -1;
    if (nwant < 0) dense = 0;
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        if (wview.buf) PyBuffer_Release(&wview);
        Py_RETURN_NONE;
    }
    const uint8_t *b = (const uint8_t *)view.buf;
    vec cols[7] = {{0}};
    vec *const mid = &cols[0], *const off = &cols[1], *const dur = &cols[2];
    vec *const s_ev = &cols[3], *const s_id = &cols[4], *const s_val = &cols[5], *const s_ref = &cols[6];
    /* dense: per wanted id, its column (made once a value is seen), this
       event's value and whether it has one */
    Py_ssize_t nd = dense ? nwant : 0;
    vec *dcol = nd ? (vec *)calloc((size_t)nd, sizeof(vec)) : NULL;
    char *made = nd ? (char *)calloc((size_t)nd, 1) : NULL;
    char *set = nd ? (char *)calloc((size_t)nd, 1) : NULL;
    int64_t *cur = nd ? (int64_t *)calloc((size_t)nd, sizeof(int64_t)) : NULL;
    Py_ssize_t pos = start, stop = end;
    int bad = 0, oom = nd && (!dcol || !made || !set || !cur);
    int64_t nev = 0;
    /* The walk touches only the (pinned) buffer and malloc'd vectors: let
       other threads run meanwhile. */
    Py_BEGIN_ALLOW_THREADS
    while (pos < end && !oom) {
        Py_ssize_t tag_pos = pos;
        uint64_t key, len;
        if (rd(b, &pos, end, &key)) { bad = 1; break; }
        if ((key >> 3) != 4 || (key & 7) != 2) { stop = tag_pos; break; }
        if (rd(b, &pos, end, &len) || len > (uint64_t)(end - pos)) { bad = 1; break; }
        Py_ssize_t ev_end = pos + (Py_ssize_t)len;
        int64_t m = 0, o = 0, d = 0;
        if (nd) memset(set, 0, (size_t)nd);
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
                Py_ssize_t wi = -1;
                if (has && nwant >= 0) {
                    Py_ssize_t i = 0;
                    while (i < nwant && want[i] != sid) i++;
                    has = i < nwant;
                    wi = i;
                }
                if (has && nd) {
                    if (!ref) { cur[wi] = sval; set[wi] = 1; }
                } else if (has) {
                    if (vec_push(s_ev, nev) || vec_push(s_id, sid) || vec_push(s_val, sval) || vec_push(s_ref, ref)) { oom = 1; break; }
                }
            } else if (skip(b, &pos, ev_end, w)) { bad = 1; break; }
        }
        if (bad || oom || pos != ev_end) { if (!oom) bad = 1; break; }
        if (vec_push(mid, m) || vec_push(off, o) || vec_push(dur, d)) { oom = 1; break; }
        for (Py_ssize_t wi = 0; wi < nd && !oom; wi++) {
            if (set[wi] && !made[wi]) {
                made[wi] = 1;
                for (int64_t j = 0; j < nev && !oom; j++) oom = vec_push(&dcol[wi], -1) != 0;
            }
            if (made[wi] && !oom) oom = vec_push(&dcol[wi], set[wi] ? cur[wi] : -1) != 0;
        }
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
        PyObject *st = PyLong_FromSsize_t(stop);
        res = st ? bytearrays_tuple(cols, 7, st) : NULL;
        if (res && dense) {
            PyObject *dt = PyTuple_New(nd);
            PyObject *both = dt ? PyTuple_New(2) : NULL;
            for (Py_ssize_t wi = 0; dt && wi < nd; wi++) {
                PyObject *c;
                if (made[wi]) {
                    c = bytearrays_tuple(&dcol[wi], 1, NULL);
                    PyObject *one = c ? PyTuple_GET_ITEM(c, 0) : NULL;
                    Py_XINCREF(one);
                    Py_XDECREF(c);
                    c = one;
                } else {
                    Py_INCREF(Py_None);
                    c = Py_None;
                }
                if (!c) { Py_CLEAR(dt); break; }
                PyTuple_SET_ITEM(dt, wi, c);
            }
            if (!dt || !both) {
                Py_XDECREF(dt);
                Py_XDECREF(both);
                Py_CLEAR(res);
            } else {
                PyTuple_SET_ITEM(both, 0, res);
                PyTuple_SET_ITEM(both, 1, dt);
                res = both;
            }
        }
    }
    for (int i = 0; i < 7; i++) free(cols[i].data);
    for (Py_ssize_t wi = 0; wi < nd; wi++) free(dcol[wi].data);
    free(dcol);
    free(made);
    free(set);
    free(cur);
    return res;
}

/* ------------------------------------------------------------------------
 * scan_fields(buf, start, end): the top-level fields of the message in
 * buf[start:end] as five int64 columns (field number, wire type, payload
 * start, payload end, tag position), or None on malformed bytes (field 0, a
 * group or unknown wire type, a field running past the end).
 * ------------------------------------------------------------------------ */
static PyObject *scan_fields(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &start, &end)) return NULL;
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    const uint8_t *b = (const uint8_t *)view.buf;
    vec cols[5] = {{0}};
    vec *fld = &cols[0], *wt = &cols[1], *ps = &cols[2], *pe = &cols[3], *tp = &cols[4];
    Py_ssize_t pos = start;
    int bad = 0, oom = 0;
    Py_BEGIN_ALLOW_THREADS
    while (pos < end) {
        Py_ssize_t tag_pos = pos, p0, p1;
        uint64_t key, n;
        if (rd(b, &pos, end, &key)) { bad = 1; break; }
        int f = (int)(key >> 3), w = (int)(key & 7);
        if ((key >> 3) == 0) { bad = 1; break; }
        if (w == 0) {
            if (rd(b, &pos, end, &n)) { bad = 1; break; }
            p0 = p1 = pos;
        } else if (w == 2) {
            if (rd(b, &pos, end, &n) || n > (uint64_t)(end - pos)) { bad = 1; break; }
            p0 = pos;
            p1 = pos + (Py_ssize_t)n;
        } else if (w == 1 || w == 5) {
            Py_ssize_t k = w == 1 ? 8 : 4;
            if (pos + k > end) { bad = 1; break; }
            p0 = pos;
            p1 = pos + k;
        } else { bad = 1; break; }
        pos = p1;
        if (vec_push(fld, f) || vec_push(wt, w) || vec_push(ps, p0) || vec_push(pe, p1) || vec_push(tp, tag_pos)) {
            oom = 1;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return columns_result(oom, bad, cols, 5);
}

/* Strict UTF-8 (no overlong forms, surrogates or code points past
   U+10FFFF), as the protobuf runtime checks proto3 string fields. */
static int utf8_ok(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {  /* eight ASCII bytes at a time */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ULL)) { i += 8; continue; }
        }
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        int len;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;
            else if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            else if (c == 0xF4) hi = 0x8F;
        } else return 0;
        if (i + len > n) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        i += len;
    }
    return 1;
}

/* One XStat in b[pos:end): metadata id, value kind (0: none, else the
   oneof's field number: 2 double, 3 uint64, 4 int64, 5 string, 6 bytes,
   7 ref), integer value (or the double's bits), string span. The last
   value field wins (oneof semantics); fields of another wire type than
   declared are unknown fields and skipped, as the protobuf runtime does. */
static int rd_stat(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, int64_t *sid, int64_t *kind, int64_t *ival,
                   int64_t *ss, int64_t *se) {
    *sid = 0; *kind = 0; *ival = 0; *ss = -1; *se = -1;
    while (pos < end) {
        uint64_t k, v;
        if (rd(b, &pos, end, &k)) return -1;
        int f = (int)(k >> 3), w = (int)(k & 7);
        if ((k >> 3) == 0) return -1;
        if (w == 0 && (f == 1 || f == 3 || f == 4 || f == 7)) {
            if (rd(b, &pos, end, &v)) return -1;
            if (f == 1) *sid = (int64_t)v;
            else { *kind = f; *ival = (int64_t)v; *ss = *se = -1; }
        } else if (w == 1 && f == 2) {
            if (pos + 8 > end) return -1;
            memcpy(ival, b + pos, 8);
            pos += 8;
            *kind = 2; *ss = *se = -1;
        } else if (w == 2 && (f == 5 || f == 6)) {
            if (rd(b, &pos, end, &v) || v > (uint64_t)(end - pos)) return -1;
            if (f == 5 && !utf8_ok(b + pos, (Py_ssize_t)v)) return -1;
            *kind = f; *ival = 0; *ss = pos; *se = pos + (Py_ssize_t)v;
            pos += (Py_ssize_t)v;
        } else if (skip(b, &pos, end, w)) return -1;
    }
    return pos == end ? 0 : -1;
}

/* ------------------------------------------------------------------------
 * decode_metadata(buf, spans): the XPlane.event_metadata map entries whose
 * payloads lie at spans (int64 pairs: start, end) as columns. Per entry:
 * key, name start/end, display_name start/end (-1: absent). Per stat of the
 * entry's XEventMetadata: entry index, stat metadata id, kind, value (or
 * the double's bits), string start/end. None on malformed bytes, invalid
 * UTF-8 in a string field or an entry holding its value twice (the protobuf
 * runtime then reports the error, or merges: let it).
 * ------------------------------------------------------------------------ */
static PyObject *decode_metadata(PyObject *self, PyObject *args) {
    Py_buffer view, sview;
    if (!PyArg_ParseTuple(args, "y*y*", &view, &sview)) return NULL;
    const uint8_t *b = (const uint8_t *)view.buf;
    const int64_t *spans = (const int64_t *)sview.buf;
    Py_ssize_t nspans = sview.len / (Py_ssize_t)(2 * sizeof(int64_t));
    vec cols[11] = {{0}};
    vec *e_key = &cols[0], *e_ns = &cols[1], *e_ne = &cols[2], *e_ds = &cols[3], *e_de = &cols[4];
    vec *s_ent = &cols[5], *s_id = &cols[6], *s_kind = &cols[7], *s_val = &cols[8], *s_ss = &cols[9], *s_se = &cols[10];
    int bad = 0, oom = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < nspans && !bad && !oom; i++) {
        Py_ssize_t pos = (Py_ssize_t)spans[2 * i], end = (Py_ssize_t)spans[2 * i + 1];
        if (pos < 0 || end > view.len || pos > end) { bad = 1; break; }
        int64_t key = 0;
        Py_ssize_t vs = -1, ve = -1;
        int nval = 0;
        while (pos < end) {
            uint64_t k, v;
            if (rd(b, &pos, end, &k)) { bad = 1; break; }
            int f = (int)(k >> 3), w = (int)(k & 7);
            if ((k >> 3) == 0) { bad = 1; break; }
            if (f == 1 && w == 0) {
                if (rd(b, &pos, end, &v)) { bad = 1; break; }
                key = (int64_t)v;
            } else if (f == 2 && w == 2) {
                if (rd(b, &pos, end, &v) || v > (uint64_t)(end - pos)) { bad = 1; break; }
                vs = pos; ve = pos + (Py_ssize_t)v; pos = ve; nval++;
            } else if (skip(b, &pos, end, w)) { bad = 1; break; }
        }
        if (bad || nval > 1) { bad = 1; break; }
        int64_t ns = -1, ne = -1, ds = -1, de = -1;
        int64_t ent = (int64_t)e_key->len;
        pos = vs; end = ve;
        while (vs >= 0 && pos < end) {
            uint64_t k, v;
            if (rd(b, &pos, end, &k)) { bad = 1; break; }
            int f = (int)(k >> 3), w = (int)(k & 7);
            if ((k >> 3) == 0) { bad = 1; break; }
            if (w == 2 && (f == 2 || f == 4 || f == 5)) {
                if (rd(b, &pos, end, &v) || v > (uint64_t)(end - pos)) { bad = 1; break; }
                Py_ssize_t p1 = pos + (Py_ssize_t)v;
                if (f != 5 && !utf8_ok(b + pos, (Py_ssize_t)v)) { bad = 1; break; }
                if (f == 2) { ns = pos; ne = p1; }
                else if (f == 4) { ds = pos; de = p1; }
                else {
                    int64_t sid, kind, ival, ss, se;
                    if (rd_stat(b, pos, p1, &sid, &kind, &ival, &ss, &se)) { bad = 1; break; }
                    if (vec_push(s_ent, ent) || vec_push(s_id, sid) || vec_push(s_kind, kind) ||
                        vec_push(s_val, ival) || vec_push(s_ss, ss) || vec_push(s_se, se)) { oom = 1; break; }
                }
                pos = p1;
            } else if (skip(b, &pos, end, w)) { bad = 1; break; }
        }
        if (bad || oom) break;
        if (vec_push(e_key, key) || vec_push(e_ns, ns) || vec_push(e_ne, ne) || vec_push(e_ds, ds) ||
            vec_push(e_de, de)) { oom = 1; break; }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyBuffer_Release(&sview);
    return columns_result(oom, bad, cols, 11);
}

/* ------------------------------------------------------------------------
 * utf8_strings(buf, starts, ends[, share]): a list of the strings at
 * buf[start:end] for each pair of int64 offsets ("" where start < 0), decoded
 * as strict UTF-8 (raises UnicodeDecodeError on invalid bytes). share: equal
 * strings are one str object (columns of few distinct values: fewer objects
 * to make, and each distinct value's hash is computed once downstream).
 * ------------------------------------------------------------------------ */
static inline uint64_t hash_bytes(const uint8_t *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        h = (h ^ x) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t x = 0;
    memcpy(&x, p, (size_t)n);
    h = (h ^ x) * 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 29);
}

static PyObject *utf8_strings(PyObject *self, PyObject *args) {
    Py_buffer view, sv, ev;
    int share = 0;
    if (!PyArg_ParseTuple(args, "y*y*y*|p", &view, &sv, &ev, &share)) return NULL;
    const char *b = (const char *)view.buf;
    const int64_t *st = (const int64_t *)sv.buf, *en = (const int64_t *)ev.buf;
    Py_ssize_t n = sv.len / (Py_ssize_t)sizeof(int64_t);
    PyObject *out = NULL, *empty = NULL;
    /* share: equal byte strings become one str object (open addressing over
       the first row of each distinct value). */
    Py_ssize_t *slot = NULL;
    uint64_t *slot_hash = NULL;
    size_t mask = 0;
    if (ev.len != sv.len) {
        PyErr_SetString(PyExc_ValueError, "starts and ends differ in length");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (st[i] >= 0 && (en[i] < st[i] || en[i] > view.len)) {
            PyErr_SetString(PyExc_ValueError, "span out of the buffer");
            goto done;
        }
    }
    if (share && n > 1) {
        size_t cap = 16;
        while (cap < (size_t)n * 2) cap <<= 1;
        slot = (Py_ssize_t *)malloc(cap * sizeof(Py_ssize_t));
        slot_hash = (uint64_t *)malloc(cap * sizeof(uint64_t));
        if (!slot || !slot_hash) { PyErr_NoMemory(); goto done; }
        for (size_t k = 0; k < cap; k++) slot[k] = -1;
        mask = cap - 1;
    }
    out = PyList_New(n);
    empty = PyUnicode_FromStringAndSize("", 0);
    if (!out || !empty) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = NULL;
        if (st[i] < 0 || en[i] == st[i]) {
            Py_INCREF(empty);
            PyList_SET_ITEM(out, i, empty);
            continue;
        }
        const uint8_t *p = (const uint8_t *)b + st[i];
        Py_ssize_t len = (Py_ssize_t)(en[i] - st[i]);
        size_t k = 0;
        uint64_t h = 0;
        if (slot) {
            h = hash_bytes(p, len);
            k = (size_t)h & mask;
            while (slot[k] >= 0) {
                Py_ssize_t j = slot[k];
                if (slot_hash[k] == h && en[j] - st[j] == len && memcmp(b + st[j], p, (size_t)len) == 0) {
                    s = PyList_GET_ITEM(out, j);
                    Py_INCREF(s);
                    break;
                }
                k = (k + 1) & mask;
            }
        }
        if (!s) {
            s = PyUnicode_DecodeUTF8((const char *)p, len, "strict");
            if (!s) goto fail;
            if (slot) {
                slot[k] = i;
                slot_hash[k] = h;
            }
        }
        PyList_SET_ITEM(out, i, s);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    free(slot);
    free(slot_hash);
    Py_XDECREF(empty);
    PyBuffer_Release(&view);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&ev);
    return out;
}

/* same_bytes(a, b): whether two buffers hold the same bytes (memcmp, without
   the GIL). */
static PyObject *same_bytes(PyObject *self, PyObject *args) {
    Py_buffer x, y;
    if (!PyArg_ParseTuple(args, "y*y*", &x, &y)) return NULL;
    int eq = x.len == y.len;
    if (eq && x.len) {
        Py_BEGIN_ALLOW_THREADS
        eq = memcmp(x.buf, y.buf, (size_t)x.len) == 0;
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&y);
    return PyBool_FromLong(eq);
}

static PyMethodDef methods[] = {
    {"decode_event_run", decode_event_run, METH_VARARGS,
     "decode_event_run(buf, start, end[, want[, dense]]) -> (mid, off, dur, stat_event, stat_id, stat_value, stat_is_ref, "
     "stop) (want: int64 stat metadata ids to keep; default all) as int64 bytearrays, or None when the bytes are not a "
     "well-formed run of XLine events; dense: (that tuple, one value column or None per wanted id)."},
    {"scan_fields", scan_fields, METH_VARARGS,
     "scan_fields(buf, start, end) -> (field, wire, payload_start, payload_end, tag_pos) as int64 bytearrays, "
     "or None when buf[start:end] is not a well-formed run of fields."},
    {"decode_metadata", decode_metadata, METH_VARARGS,
     "decode_metadata(buf, spans) -> (key, name_start, name_end, display_start, display_end, stat_entry, stat_id, "
     "stat_kind, stat_value, stat_start, stat_end) as int64 bytearrays for the XPlane.event_metadata map entries "
     "at spans (int64 start, end pairs), or None on malformed bytes."},
    {"utf8_strings", utf8_strings, METH_VARARGS,
     "utf8_strings(buf, starts, ends[, share]) -> list of str: buf[start:end] decoded as strict UTF-8 for each pair of "
     "int64 offsets (\"\" where start < 0); share: equal strings are one object."},
    {"same_bytes", same_bytes, METH_VARARGS, "same_bytes(a, b) -> bool: the two buffers hold the same bytes."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wire", "One-pass XSpace wire decoders.", -1, methods};

PyMODINIT_FUNC PyInit__wire(void) { return PyModule_Create(&module); }
