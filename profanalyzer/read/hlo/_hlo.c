/* Optional C accelerator of profanalyzer.read.hlo.proto: the instructions of an HloModuleProto (wire
 * bytes, field numbers of hlo_min.proto) built as `Instruction`s with the text the compiler prints for
 * them, in one pass per instruction.
 *
 *   instructions(data, nested, ins_names, comp_names, shapes, new_shape, metas, new_meta, Instruction)
 *
 * `data`: an HloProto (`nested` true: its field 1 is the module) or a bare HloModuleProto. Returns, per
 * computation in wire order, the list of its instructions in wire order: an Instruction (its dict filled
 * in one step, as Instruction.decoded fills it), or None where the instruction takes the Python path
 * (proto.py's `_instruction`): a constant, a convolution or dot, a collective's replica groups, a string
 * that needs JSON escapes, a field given twice that the runtime would merge. None for the whole module
 * when its bytes are not what this reader expects (the Python path decodes it).
 *
 * `ins_names` / `comp_names`: id -> name (proto.py's tables); `shapes`: raw Shape bytes -> (Shape,
 * text), filled through `new_shape(raw)` on a miss; `metas`: (op_type, op_name, source_file,
 * source_line, stack_frame_id) -> (OpMetadata, text), filled through `new_meta(key)`. The texts equal the
 * Python path's (tests/test_hlo_accelerator.py compares both). Written for profanalyzer. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct { const uint8_t *p, *end; } Cur;

static int rd_varint(Cur *c, uint64_t *out) {
    uint64_t v = 0;
    int shift = 0;
    while (c->p < c->end && shift < 64) {
        uint8_t b = *c->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 1;
        }
        shift += 7;
    }
    return 0;
}

/* One field: its number, wire type, and value (varint) or span (length-delimited). */
typedef struct {
    uint32_t num;
    int wt;
    uint64_t v;
    const uint8_t *s;
    Py_ssize_t n;
} Field;

static int next_field(Cur *c, Field *f) {
    uint64_t key;
    if (!rd_varint(c, &key))
        return 0;
    f->num = (uint32_t)(key >> 3);
    f->wt = (int)(key & 7);
    f->s = NULL;
    f->n = 0;
    switch (f->wt) {
    case 0:
        return rd_varint(c, &f->v);
    case 1:
        if (c->end - c->p < 8) return 0;
        c->p += 8;
        return 1;
    case 5:
        if (c->end - c->p < 4) return 0;
        c->p += 4;
        return 1;
    case 2: {
        uint64_t n;
        if (!rd_varint(c, &n) || n > (uint64_t)(c->end - c->p)) return 0;
        f->s = c->p;
        f->n = (Py_ssize_t)n;
        c->p += n;
        return 1;
    }
    default:
        return 0;
    }
}

#define MAXREP 4096

typedef struct {
    int64_t v[MAXREP];
    int n;
    int overflow;
} Ints;

/* A repeated int64 field, packed (wire type 2) or not (0); appended in wire order. */
static int add_ints(Ints *r, const Field *f) {
    if (f->wt == 0) {
        if (r->n >= MAXREP) { r->overflow = 1; return 1; }
        r->v[r->n++] = (int64_t)f->v;
        return 1;
    }
    if (f->wt != 2) return 0;
    Cur c = {f->s, f->s + f->n};
    while (c.p < c.end) {
        uint64_t v;
        if (!rd_varint(&c, &v)) return 0;
        if (r->n >= MAXREP) { r->overflow = 1; return 1; }
        r->v[r->n++] = (int64_t)v;
    }
    return 1;
}

/* A growing UTF-8 buffer. */
typedef struct { char *b; Py_ssize_t n, cap; } Buf;

static int put(Buf *o, const char *s, Py_ssize_t n) {
    if (o->n + n > o->cap) {
        Py_ssize_t cap = (o->cap ? o->cap : 256);
        while (cap < o->n + n) cap *= 2;
        char *nb = PyMem_Realloc(o->b, cap);
        if (!nb) return 0;
        o->b = nb;
        o->cap = cap;
    }
    memcpy(o->b + o->n, s, n);
    o->n += n;
    return 1;
}

static int puts_(Buf *o, const char *s) { return put(o, s, (Py_ssize_t)strlen(s)); }

static int put_int(Buf *o, int64_t v) {
    char tmp[32];
    int k = snprintf(tmp, sizeof tmp, "%lld", (long long)v);
    return put(o, tmp, k);
}

/* proto.py's `_quoted` without the JSON encoder: plain printable ASCII without `"` or `\`. */
static int plain(const uint8_t *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e || s[i] == '"' || s[i] == '\\') return 0;
    return 1;
}

static PyObject *str_of(const uint8_t *s, Py_ssize_t n) {
    return PyUnicode_DecodeUTF8((const char *)s, n, NULL);
}

/* A Python str as UTF-8 into the buffer. */
static int put_str(Buf *o, PyObject *u) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(u, &n);
    return s != NULL && put(o, s, n);
}

static int is_one_of(const uint8_t *s, Py_ssize_t n, const char *const *names) {
    for (; *names; names++)
        if ((Py_ssize_t)strlen(*names) == n && memcmp(s, *names, n) == 0) return 1;
    return 0;
}

static const char *const DIM_OPS[] = {"broadcast", "reduce", "transpose", "all-gather", "reverse", "concatenate", NULL};
static const char *const SLOW_OPS[] = {"constant", "convolution", "dot", "ragged-dot", "scaled-dot", NULL};
static const char *const CALLS_OPS[] = {"fusion", "async-start", "async-update", "async-done", NULL};
static const char *const TO_APPLY_OPS[] = {"call", "map", "reduce", "reduce-window", "scatter", "sort",
                                           "select-and-scatter", "all-reduce", "reduce-scatter", "all-reduce-start",
                                           "custom-call", NULL};

/* Instruction's fields, in order (model.py); their interned names are made at import. */
#define N_FIELDS 14
static const char *const FIELD_NAMES[N_FIELDS] = {
    "name", "opcode", "shape", "operands", "operand_indices", "called", "attrs", "metadata", "backend_config",
    "text", "is_root", "parameter_number", "literal", "literal_stats"};
static PyObject *FIELD_KEYS[N_FIELDS];
static PyObject *EMPTY_TUPLE, *EMPTY_STR;

/* An instance of the frozen dataclass `cls` with every field given, its dict filled in one step (as
 * Instruction.decoded does: the frozen __setattr__ is not called). New reference. */
static PyObject *new_instruction(PyObject *cls, PyObject *const *values) {
    PyTypeObject *tp = (PyTypeObject *)cls;
    PyObject *ins = tp->tp_alloc(tp, 0);
    if (!ins) return NULL;
    PyObject *d = PyObject_GenericGetDict(ins, NULL);
    if (!d) { Py_DECREF(ins); return NULL; }
    for (int i = 0; i < N_FIELDS; i++)
        if (PyDict_SetItem(d, FIELD_KEYS[i], values[i])) { Py_DECREF(d); Py_DECREF(ins); return NULL; }
    Py_DECREF(d);
    return ins;
}

typedef struct {
    PyObject *ins_names, *comp_names, *shapes, *new_shape, *metas, *new_meta;
    PyObject *decoded;  /* the Instruction class */
    Ints *ints;  /* 4 repeated fields' scratch, one per call */
} Ctx;

/* Name of an id in a table, else `<prefix>.<id>` (new reference). */
static PyObject *name_of(PyObject *table, int64_t id, const char *prefix) {
    PyObject *k = PyLong_FromLongLong(id);
    if (!k) return NULL;
    PyObject *v = PyDict_GetItemWithError(table, k);
    Py_DECREF(k);
    if (v) {
        Py_INCREF(v);
        return v;
    }
    if (PyErr_Occurred()) return NULL;
    return PyUnicode_FromFormat("%s.%lld", prefix, (long long)id);
}

/* memo[key], else fill(key) stored in memo (borrowed from the memo). */
static PyObject *memo_get(PyObject *memo, PyObject *key, PyObject *fill) {
    PyObject *v = PyDict_GetItemWithError(memo, key);
    if (v || PyErr_Occurred()) return v;
    v = PyObject_CallOneArg(fill, key);
    if (!v) return NULL;
    int bad = PyDict_SetItem(memo, key, v);
    Py_DECREF(v);
    return bad ? NULL : PyDict_GetItem(memo, key);
}

/* The metadata key (op_type, op_name, source_file, source_line, stack_frame_id) of an OpMetadata's bytes. */
static PyObject *meta_key(const uint8_t *s, Py_ssize_t n) {
    const uint8_t *str[3] = {(const uint8_t *)"", (const uint8_t *)"", (const uint8_t *)""};
    Py_ssize_t len[3] = {0, 0, 0};
    int32_t line = 0, frame = 0;
    Cur c = {s, s + n};
    Field f;
    while (c.p < c.end) {
        if (!next_field(&c, &f)) return Py_None;  /* not readable here: the Python path */
        if (f.num >= 1 && f.num <= 3) {
            if (f.wt != 2) return Py_None;
            str[f.num - 1] = f.s;
            len[f.num - 1] = f.n;
        } else if (f.num == 4 && f.wt == 0) {
            line = (int32_t)f.v;
        } else if (f.num == 15 && f.wt == 0) {
            frame = (int32_t)f.v;
        } else if (f.num == 4 || f.num == 15) {
            return Py_None;
        }
    }
    PyObject *a = str_of(str[0], len[0]), *b = str_of(str[1], len[1]), *d = str_of(str[2], len[2]);
    if (!a || !b || !d) {
        Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(d);
        PyErr_Clear();
        return Py_None;
    }
    return Py_BuildValue("(NNNii)", a, b, d, (int)line, (int)frame);
}

#define SLOW_PATH 1  /* build() result: this instruction takes the Python path */

/* One instruction's bytes -> an Instruction (*out), or SLOW_PATH, or -1 with an exception set. */
static int build(const Ctx *x, const uint8_t *s, Py_ssize_t n, int64_t root_id, PyObject **out) {
    const uint8_t *name = (const uint8_t *)"", *opcode = (const uint8_t *)"", *kind = NULL, *dir = NULL,
                  *target = NULL, *thread = NULL, *backend = (const uint8_t *)"", *shape = (const uint8_t *)"",
                  *meta = (const uint8_t *)"", *front = NULL;
    Py_ssize_t name_n = 0, opcode_n = 0, kind_n = 0, dir_n = 0, target_n = 0, thread_n = 0, backend_n = 0,
               shape_n = 0, meta_n = 0, front_n = 0;
    int64_t pnum = 0, tuple_index = 0, channel = 0, id = 0;
    int shapes_seen = 0, metas_seen = 0, fronts_seen = 0;
    Ints *const r = x->ints;  /* this call's own: a callback may let another thread decode meanwhile */
    Ints *const dims_p = &r[0], *const slices_p = &r[1], *const operands_p = &r[2], *const called_p = &r[3];
#define dims (*dims_p)
#define slices (*slices_p)
#define operands (*operands_p)
#define called (*called_p)
    dims.n = slices.n = operands.n = called.n = 0;
    dims.overflow = slices.overflow = operands.overflow = called.overflow = 0;
    Cur c = {s, s + n};
    Field f;
    while (c.p < c.end) {
        if (!next_field(&c, &f)) return SLOW_PATH;
        int ok = 1;
        switch (f.num) {
        case 1: ok = f.wt == 2; name = f.s; name_n = f.n; break;
        case 2: ok = f.wt == 2; opcode = f.s; opcode_n = f.n; break;
        case 3: ok = f.wt == 2; shape = f.s; shape_n = f.n; shapes_seen++; break;
        case 7: ok = f.wt == 2; meta = f.s; meta_n = f.n; metas_seen++; break;
        case 8: case 49: case 87: case 93:
            return SLOW_PATH;  /* a literal, replica groups: the Python path */
        case 15: case 16: case 30:
            break;  /* window, convolution and dot numbers: printed for the math ops only (the Python path's) */
        case 9: ok = f.wt == 0; pnum = (int64_t)f.v; break;
        case 11: ok = f.wt == 2; kind = f.s; kind_n = f.n; break;
        case 13: ok = f.wt == 0; tuple_index = (int64_t)f.v; break;
        case 14: ok = add_ints(&dims, &f); break;
        case 26: ok = f.wt == 0; channel = (int64_t)f.v; break;
        case 28: ok = f.wt == 2; target = f.s; target_n = f.n; break;
        case 34: ok = add_ints(&slices, &f); break;
        case 35: ok = f.wt == 0; id = (int64_t)f.v; break;
        case 36: ok = add_ints(&operands, &f); break;
        case 38: ok = add_ints(&called, &f); break;
        case 43: ok = f.wt == 2; backend = f.s; backend_n = f.n; break;
        case 63: ok = f.wt == 2; dir = f.s; dir_n = f.n; break;
        case 68: ok = f.wt == 2; front = f.s; front_n = f.n; fronts_seen++; break;
        case 79: ok = f.wt == 2; thread = f.s; thread_n = f.n; break;
        default: break;  /* a field the schema leaves out */
        }
        if (!ok) return SLOW_PATH;
    }
    (void)id;
    if (shapes_seen > 1 || metas_seen > 1 || fronts_seen > 1 || dims.overflow || slices.overflow ||
        operands.overflow || called.overflow)
        return SLOW_PATH;  /* merged by the runtime, or beyond this reader's bounds */
    if (is_one_of(opcode, opcode_n, SLOW_OPS)) return SLOW_PATH;
    if ((target && !plain(target, target_n)) || (thread && !plain(thread, thread_n))) return SLOW_PATH;
    if (kind_n && kind[0] != 'k' && kind[0] >= 0x80) return SLOW_PATH;

    PyObject *py_name = NULL, *py_opcode = NULL, *ops = NULL, *called_t = NULL, *attrs = NULL, *backend_s = NULL,
             *text = NULL, *shape_key = NULL, *mkey = NULL, *result = NULL, *sh = NULL, *md = NULL;
    Buf o = {0}, a = {0};
    int status = -1;
    PyObject *attr_list = PyList_New(0);
    if (!attr_list) return -1;
#define ATTR(K, V) do { PyObject *_v = (V); if (!_v) goto slow_on_error; \
        PyObject *_t = Py_BuildValue("(sN)", (K), _v); if (!_t || PyList_Append(attr_list, _t)) { Py_XDECREF(_t); goto done; } \
        Py_DECREF(_t); } while (0)
#define ATTR_BUF(K) do { ATTR((K), PyUnicode_DecodeUTF8(a.b, a.n, NULL)); a.n = 0; } while (0)

    py_name = str_of(name, name_n);
    py_opcode = str_of(opcode, opcode_n);
    if (!py_name || !py_opcode) goto slow_on_error;
    if (kind_n) {
        if (kind[0] == 'k') {
            ATTR("kind", str_of(kind, kind_n));
        } else {
            char first = (char)kind[0];
            if (first >= 'a' && first <= 'z') first = (char)(first - 'a' + 'A');
            if (!put(&a, "k", 1) || !put(&a, &first, 1) || !put(&a, (const char *)kind + 1, kind_n - 1)) goto done;
            ATTR_BUF("kind");
        }
    }
    if (dir_n) ATTR("direction", str_of(dir, dir_n));
    if (opcode_n == 17 && memcmp(opcode, "get-tuple-element", 17) == 0) {
        if (!put_int(&a, tuple_index > 0 ? tuple_index : 0)) goto done;
        ATTR_BUF("index");
    }
    if (channel > 0) {
        if (!put_int(&a, channel)) goto done;
        ATTR_BUF("channel_id");
    }
    if (dims.n && is_one_of(opcode, opcode_n, DIM_OPS)) {
        if (!put(&a, "{", 1)) goto done;
        for (int i = 0; i < dims.n; i++)
            if ((i && !put(&a, ",", 1)) || !put_int(&a, dims.v[i])) goto done;
        if (!put(&a, "}", 1)) goto done;
        ATTR_BUF("dimensions");
    }
    if (slices.n && opcode_n == 6 && memcmp(opcode, "gather", 6) == 0) {
        if (!put(&a, "{", 1)) goto done;
        for (int i = 0; i < slices.n; i++)
            if ((i && !put(&a, ",", 1)) || !put_int(&a, slices.v[i])) goto done;
        if (!put(&a, "}", 1)) goto done;
        ATTR_BUF("slice_sizes");
    }
    if (thread_n) {
        if (!put(&a, "\"", 1) || !put(&a, (const char *)thread, thread_n) || !put(&a, "\"", 1)) goto done;
        ATTR_BUF("async_execution_thread");
    }
    called_t = PyTuple_New(called.n);
    if (!called_t) goto done;
    for (int i = 0; i < called.n; i++) {
        PyObject *cn = name_of(x->comp_names, called.v[i], "computation");
        if (!cn) goto done;
        PyTuple_SET_ITEM(called_t, i, cn);
    }
    if (called.n) {
        if (opcode_n == 5 && memcmp(opcode, "while", 5) == 0) {
            const char *keys[2] = {"body", "condition"};
            for (int i = 0; i < called.n && i < 2; i++) {
                if (!put(&a, "%", 1) || !put_str(&a, PyTuple_GET_ITEM(called_t, i))) goto done;
                ATTR_BUF(keys[i]);
            }
        } else if (opcode_n == 11 && memcmp(opcode, "conditional", 11) == 0) {
            if (!put(&a, "{", 1)) goto done;
            for (int i = 0; i < called.n; i++)
                if ((i && !put(&a, ", ", 2)) || !put(&a, "%", 1) || !put_str(&a, PyTuple_GET_ITEM(called_t, i))) goto done;
            if (!put(&a, "}", 1)) goto done;
            ATTR_BUF("branch_computations");
        } else {
            const char *key = is_one_of(opcode, opcode_n, CALLS_OPS) ? "calls"
                              : is_one_of(opcode, opcode_n, TO_APPLY_OPS) ? "to_apply" : "calls";
            if (!put(&a, "%", 1) || !put_str(&a, PyTuple_GET_ITEM(called_t, 0))) goto done;
            ATTR_BUF(key);
        }
    }
    if (target_n) {
        if (!put(&a, "\"", 1) || !put(&a, (const char *)target, target_n) || !put(&a, "\"", 1)) goto done;
        ATTR_BUF("custom_call_target");
    }
    if (front_n) {  /* entries key=value in wire order; a value that is not `{...}` is quoted */
        Cur fc = {front, front + front_n};
        Field e;
        int items = 0;
        while (fc.p < fc.end) {
            if (!next_field(&fc, &e)) goto slow_on_error;
            if (e.num != 1) continue;
            if (e.wt != 2) goto slow_on_error;
            const uint8_t *k = (const uint8_t *)"", *v = (const uint8_t *)"";
            Py_ssize_t kn = 0, vn = 0;
            Cur ec = {e.s, e.s + e.n};
            Field g;
            while (ec.p < ec.end) {
                if (!next_field(&ec, &g)) goto slow_on_error;
                if ((g.num == 1 || g.num == 2) && g.wt != 2) goto slow_on_error;
                if (g.num == 1) { k = g.s; kn = g.n; }
                else if (g.num == 2) { v = g.s; vn = g.n; }
            }
            int braced = vn > 0 && v[0] == '{';
            if (!braced && !plain(v, vn)) goto slow_on_error;
            if ((items && !put(&a, ",", 1)) || !put(&a, (const char *)k, kn) || !put(&a, "=", 1)) goto done;
            if (braced ? !put(&a, (const char *)v, vn)
                       : (!put(&a, "\"", 1) || !put(&a, (const char *)v, vn) || !put(&a, "\"", 1))) goto done;
            items++;
        }
        if (items) {
            PyObject *inner = PyUnicode_DecodeUTF8(a.b, a.n, NULL);
            a.n = 0;
            if (!inner) goto slow_on_error;
            ATTR("frontend_attributes", PyUnicode_FromFormat("{%U}", inner));
            Py_DECREF(inner);
        }
    }
    attrs = PyList_AsTuple(attr_list);
    if (!attrs) goto done;

    shape_key = PyBytes_FromStringAndSize((const char *)shape, shape_n);
    if (!shape_key) goto done;
    sh = memo_get(x->shapes, shape_key, x->new_shape);  /* (Shape, text) */
    if (!sh) goto done;
    Py_INCREF(sh);
    mkey = meta_key(meta, meta_n);
    if (mkey == Py_None) { mkey = NULL; status = SLOW_PATH; goto done; }
    if (!mkey) goto done;
    md = memo_get(x->metas, mkey, x->new_meta);  /* (OpMetadata, text) */
    if (!md) goto done;
    Py_INCREF(md);

    ops = PyTuple_New(operands.n);
    if (!ops) goto done;
    for (int i = 0; i < operands.n; i++) {
        PyObject *on = name_of(x->ins_names, operands.v[i], "unknown");
        if (!on) goto done;
        PyTuple_SET_ITEM(ops, i, on);
    }
    int is_param = opcode_n == 9 && memcmp(opcode, "parameter", 9) == 0;
    int64_t param = pnum ? pnum : -1;
    if (is_param && param < 0) param = 0;
    if (!put(&o, "%", 1) || !put(&o, (const char *)name, name_n) || !put(&o, " = ", 3) ||
        !put_str(&o, PyTuple_GET_ITEM(sh, 1)) || !put(&o, " ", 1) || !put(&o, (const char *)opcode, opcode_n) ||
        !put(&o, "(", 1))
        goto done;
    if (is_param) {
        if (!put_int(&o, param)) goto done;
    } else {
        for (int i = 0; i < operands.n; i++)
            if ((i && !put(&o, ", ", 2)) || !put(&o, "%", 1) || !put_str(&o, PyTuple_GET_ITEM(ops, i))) goto done;
    }
    if (!put(&o, ")", 1)) goto done;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(attrs); i++) {
        PyObject *kv = PyTuple_GET_ITEM(attrs, i);
        if (!put(&o, ", ", 2) || !put_str(&o, PyTuple_GET_ITEM(kv, 0)) || !put(&o, "=", 1) ||
            !put_str(&o, PyTuple_GET_ITEM(kv, 1)))
            goto done;
    }
    if (!put_str(&o, PyTuple_GET_ITEM(md, 1))) goto done;
    backend_s = PyUnicode_DecodeUTF8((const char *)backend, backend_n, "replace");
    if (!backend_s) goto done;
    if (backend_n && (!puts_(&o, ", backend_config=") || !put_str(&o, backend_s))) goto done;
    text = PyUnicode_DecodeUTF8(o.b, o.n, NULL);
    if (!text) goto slow_on_error;
    {
        PyObject *pn = PyLong_FromLongLong(param);
        if (!pn) goto done;
        PyObject *values[N_FIELDS] = {py_name, py_opcode, PyTuple_GET_ITEM(sh, 0), ops, EMPTY_TUPLE, called_t, attrs,
                                      PyTuple_GET_ITEM(md, 0), backend_s, text,
                                      ((id ? id : -1) == root_id) ? Py_True : Py_False, pn, EMPTY_STR, EMPTY_TUPLE};
        result = new_instruction(x->decoded, values);
        Py_DECREF(pn);
    }
    if (!result) goto done;
    *out = result;
    status = 0;
    goto done;
slow_on_error:
    PyErr_Clear();
    status = SLOW_PATH;
done:
    Py_XDECREF(py_name); Py_XDECREF(py_opcode); Py_XDECREF(ops); Py_XDECREF(called_t); Py_XDECREF(attrs);
    Py_XDECREF(backend_s); Py_XDECREF(text); Py_XDECREF(shape_key); Py_XDECREF(mkey); Py_DECREF(attr_list);
    Py_XDECREF(sh); Py_XDECREF(md);
    PyMem_Free(o.b);
    PyMem_Free(a.b);
    return status;
#undef ATTR
#undef ATTR_BUF
#undef dims
#undef slices
#undef operands
#undef called
}

/* One computation's bytes -> the list of its instructions (Instruction or None); NULL on error; Py_None when
 * the computation is not readable here. */
static PyObject *computation(const Ctx *x, const uint8_t *s, Py_ssize_t n) {
    int64_t root = 0;
    Cur c = {s, s + n};
    Field f;
    while (c.p < c.end) {  /* the root first: it may follow the instructions */
        if (!next_field(&c, &f)) return Py_None;
        if (f.num == 6 && f.wt == 0) root = (int64_t)f.v;
    }
    int64_t root_id = root ? root : -1;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    c.p = s;
    while (c.p < c.end) {
        next_field(&c, &f);
        if (f.num != 2) continue;
        if (f.wt != 2) { Py_DECREF(out); return Py_None; }
        PyObject *ins = NULL;
        int st = build(x, f.s, f.n, root_id, &ins);
        if (st < 0) { Py_DECREF(out); return NULL; }
        if (st == SLOW_PATH) { ins = Py_None; Py_INCREF(ins); }
        if (PyList_Append(out, ins)) { Py_DECREF(ins); Py_DECREF(out); return NULL; }
        Py_DECREF(ins);
    }
    return out;
}

static PyObject *instructions(PyObject *self, PyObject *args) {
    Py_buffer buf;
    int nested;
    Ctx x;
    if (!PyArg_ParseTuple(args, "y*pO!O!O!OO!OO!", &buf, &nested, &PyDict_Type, &x.ins_names, &PyDict_Type,
                          &x.comp_names, &PyDict_Type, &x.shapes, &x.new_shape, &PyDict_Type, &x.metas, &x.new_meta,
                          &PyType_Type, &x.decoded))
        return NULL;
    const uint8_t *s = buf.buf;
    Py_ssize_t n = buf.len;
    PyObject *result = NULL;
    x.ints = PyMem_Malloc(4 * sizeof(Ints));
    if (!x.ints) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    if (nested) {  /* HloProto: the module is field 1, given once */
        Cur c = {s, s + n};
        Field f;
        const uint8_t *ms = NULL;
        Py_ssize_t mn = 0;
        int seen = 0;
        while (c.p < c.end) {
            if (!next_field(&c, &f)) goto none;
            if (f.num == 1) {
                if (f.wt != 2) goto none;
                ms = f.s; mn = f.n; seen++;
            }
        }
        if (seen != 1) goto none;
        s = ms;
        n = mn;
    }
    result = PyList_New(0);
    if (!result) goto out;
    Cur c = {s, s + n};
    Field f;
    while (c.p < c.end) {
        if (!next_field(&c, &f)) goto none;
        if (f.num != 3) continue;
        if (f.wt != 2) goto none;
        PyObject *comp = computation(&x, f.s, f.n);
        if (!comp) { Py_CLEAR(result); goto out; }
        if (comp == Py_None) goto none;
        int bad = PyList_Append(result, comp);
        Py_DECREF(comp);
        if (bad) { Py_CLEAR(result); goto out; }
    }
    goto out;
none:
    Py_XDECREF(result);
    result = Py_None;
    Py_INCREF(result);
out:
    PyMem_Free(x.ints);
    PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef methods[] = {
    {"instructions", instructions, METH_VARARGS,
     "instructions(data, nested, ins_names, comp_names, shapes, new_shape, metas, new_meta, Instruction) -> list | None"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hlo", "HloModuleProto instructions in one pass", -1,
                                    methods};

PyMODINIT_FUNC PyInit__hlo(void) {
    for (int i = 0; i < N_FIELDS; i++)
        if (!(FIELD_KEYS[i] = PyUnicode_InternFromString(FIELD_NAMES[i]))) return NULL;
    if (!(EMPTY_TUPLE = PyTuple_New(0)) || !(EMPTY_STR = PyUnicode_FromString(""))) return NULL;
    return PyModule_Create(&module);
}
