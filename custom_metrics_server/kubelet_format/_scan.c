/* The optional C reader of one canonical run of kubelet series lines (see runs.py).
 *
 * scan_run(body, start, end, head[, reference, reference_head]) reads body[start:end] when
 * it is exactly
 *     line ("\n" line)*,  line = label " " value [" " stamp]
 * with every line alike (all with a stamp or none), each label starting with `head` and
 * holding no ASCII whitespace, each value a plain decimal ([+-]digits[.digits][e[+-]digits])
 * and each stamp 1 to 18 ASCII digits. It returns (labels joined by "\n", values, stamps /
 * 1000 or None, the smallest value): the pure-Python reader's answer for that text, bit for
 * bit; or None for any other text (the pure-Python reader then decides). With a reference
 * run's label text (lines starting with reference_head), the lines must also name the same
 * series in the same order (the same text after the heads) and the labels returned are the
 * reference object itself. One pass over the bytes: no Python object per byte, one float per
 * value and one per distinct stamp.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* bytes.split()'s whitespace (Py_ISSPACE): space, \t, \n, \r, \v, \f. */
static const unsigned char SPACE[256] = {
    [' '] = 1, ['\t'] = 1, ['\n'] = 1, ['\r'] = 1, ['\x0b'] = 1, ['\x0c'] = 1,
};
#define is_space(c) (SPACE[(unsigned char)(c)])

/* The first whitespace byte at or after p (limit when none): 16 bytes a step with SSE2. */
static const char *next_space(const char *p, const char *limit) {
#ifdef __SSE2__
    const __m128i space = _mm_set1_epi8(' '), nine = _mm_set1_epi8(9), four = _mm_set1_epi8(4);
    while (limit - p >= 16) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)p);
        __m128i shifted = _mm_sub_epi8(bytes, nine); /* \t..\r become 0..4 */
        __m128i control = _mm_cmpeq_epi8(_mm_min_epu8(shifted, four), shifted);
        int mask = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(bytes, space), control));
        if (mask) return p + __builtin_ctz((unsigned)mask);
        p += 16;
    }
#endif
    while (p < limit && !is_space(*p)) p++;
    return p;
}

static const double POWERS[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The plain decimal ([+-]digits[.digits][(e|E)[+-]digits], at least one digit before the
 * exponent) at p: its end (the first byte after it) and *out, or NULL when p does not start
 * with one. A mantissa up to 2**53 with a power of ten up to 22 takes Clinger's fast path (one
 * correctly rounded IEEE multiplication or division of exact operands: float()'s result); the
 * rest go to PyOS_string_to_double, float()'s own conversion. */
static const char *read_value(const char *p, const char *limit, double *out) {
    const char *s = p;
    int negative = 0;
    uint64_t mantissa = 0;
    long exponent = 0;
    if (s < limit && (*s == '+' || *s == '-')) {
        negative = *s == '-';
        s++;
    }
    const char *digits = s;
    while (s < limit && (unsigned char)(*s - '0') < 10) mantissa = mantissa * 10 + (uint64_t)(*s++ - '0');
    Py_ssize_t count = s - digits, fraction = 0;
    if (s < limit && *s == '.') {
        const char *point = ++s;
        while (s < limit && (unsigned char)(*s - '0') < 10) mantissa = mantissa * 10 + (uint64_t)(*s++ - '0');
        fraction = s - point;
        count += fraction;
    }
    if (count == 0) return NULL;
    if (s < limit && (*s == 'e' || *s == 'E')) {
        s++;
        int exp_negative = 0;
        if (s < limit && (*s == '+' || *s == '-')) {
            exp_negative = *s == '-';
            s++;
        }
        const char *exp_digits = s;
        while (s < limit && (unsigned char)(*s - '0') < 10) {
            if (exponent < 100000) exponent = exponent * 10 + (*s - '0');
            s++;
        }
        if (s == exp_digits) return NULL;
        if (exp_negative) exponent = -exponent;
    }
#if FLT_EVAL_METHOD == 0
    if (count <= 19 && mantissa <= ((uint64_t)1 << 53)) { /* no overflow, exact as a double */
        long power = exponent - (long)fraction;
        double value = (double)mantissa;
        if (power >= 0 && power <= 22) {
            *out = negative ? -(value * POWERS[power]) : value * POWERS[power];
            return s;
        }
        if (power < 0 && power >= -22) {
            *out = negative ? -(value / POWERS[-power]) : value / POWERS[-power];
            return s;
        }
    }
#endif
    char buffer[64];
    if (s - p >= (Py_ssize_t)sizeof(buffer)) return NULL;
    memcpy(buffer, p, (size_t)(s - p));
    buffer[s - p] = '\0';
    char *stop = NULL;
    double value = PyOS_string_to_double(buffer, &stop, NULL);
    if (value == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return NULL;
    }
    if (stop != buffer + (s - p)) return NULL;
    *out = value;
    return s;
}

static PyObject *scan_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4 && nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "scan_run takes 4 or 6 arguments");
        return NULL;
    }
    PyObject *reference = nargs == 6 ? args[4] : NULL;
    if (!PyBytes_Check(args[0]) || !PyBytes_Check(args[3]) ||
        (reference != NULL && (!PyBytes_Check(reference) || !PyBytes_Check(args[5])))) {
        PyErr_SetString(PyExc_TypeError, "scan_run: body, head and the reference are bytes");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), end = PyLong_AsSsize_t(args[2]);
    if ((start == -1 || end == -1) && PyErr_Occurred()) return NULL;
    Py_ssize_t body_len = PyBytes_GET_SIZE(args[0]), head_len = PyBytes_GET_SIZE(args[3]);
    PyObject *result = NULL, *labels = NULL, *values = NULL, *times = NULL, *last_time = NULL;
    double last_stamp = -1.0, least = Py_HUGE_VAL;
    const char *last_text = NULL;
    Py_ssize_t last_length = 0;
    /* the reference run's label text and the head each of its lines starts with */
    const char *ref = NULL, *ref_limit = NULL, *ref_head = NULL;
    Py_ssize_t ref_head_len = 0;
    if (reference != NULL) {
        ref = PyBytes_AS_STRING(reference);
        ref_limit = ref + PyBytes_GET_SIZE(reference);
        ref_head = PyBytes_AS_STRING(args[5]);
        ref_head_len = PyBytes_GET_SIZE(args[5]);
    }
    if (start < 0 || end > body_len || start >= end) goto unsure;
    const char *text = PyBytes_AS_STRING(args[0]);
    const char *head_text = PyBytes_AS_STRING(args[3]);
    labels = reference != NULL ? Py_NewRef(reference) : PyBytes_FromStringAndSize(NULL, end - start);
    values = PyList_New(0);
    times = PyList_New(0);
    if (labels == NULL || values == NULL || times == NULL) goto fail;
    char *out = reference != NULL ? NULL : PyBytes_AS_STRING(labels);
    Py_ssize_t written = 0;
    int shape = 0; /* tokens a line: 2 or 3, set by the first line */
    const char *p = text + start, *limit = text + end;
    while (1) {
        /* label: starts with head, then no whitespace up to one space */
        if (limit - p < head_len || memcmp(p, head_text, (size_t)head_len) != 0) goto unsure;
        const char *q = next_space(p + head_len, limit);
        if (q == limit || *q != ' ') goto unsure;
        if (reference != NULL) {
            /* the same series as the reference's next line: the same text after the heads */
            Py_ssize_t rest = q - p - head_len;
            if (ref == NULL || ref_limit - ref < ref_head_len + rest ||
                memcmp(ref, ref_head, (size_t)ref_head_len) != 0 ||
                memcmp(ref + ref_head_len, p + head_len, (size_t)rest) != 0)
                goto unsure;
            ref += ref_head_len + rest;
            if (ref == ref_limit) {
                ref = NULL; /* used up */
            } else if (*ref++ != '\n') {
                goto unsure;
            }
        } else {
            if (written) out[written++] = '\n';
            memcpy(out + written, p, (size_t)(q - p));
            written += q - p;
        }
        /* value */
        double value;
        q = read_value(q + 1, limit, &value);
        /* the value's token ends with it: anything else is not a plain decimal */
        if (q == NULL || (q < limit && *q != ' ' && *q != '\n')) goto unsure;
        if (value < least || value != value) least = value;
        PyObject *number = PyFloat_FromDouble(value);
        if (number == NULL || PyList_Append(values, number) < 0) {
            Py_XDECREF(number);
            goto fail;
        }
        Py_DECREF(number);
        /* stamp, if any */
        int tokens = 2;
        if (q < limit && *q == ' ') {
            p = q + 1;
            if (last_time != NULL && limit - p >= last_length &&
                memcmp(p, last_text, (size_t)last_length) == 0 &&
                (p + last_length == limit || p[last_length] == '\n')) {
                /* the previous line's stamp again (a kubelet stamps a family alike) */
                q = p + last_length;
                if (PyList_Append(times, last_time) < 0) goto fail;
                tokens = 3;
                goto line_end;
            }
            q = p;
            int64_t stamp = 0;
            while (q < limit && *q >= '0' && *q <= '9' && q - p < 19) {
                stamp = stamp * 10 + (*q - '0');
                q++;
            }
            if (q == p || q - p > 18) goto unsure;
            double seconds = (double)stamp / 1000.0;
            if (last_time == NULL || seconds != last_stamp) {
                Py_XDECREF(last_time);
                last_time = PyFloat_FromDouble(seconds);
                if (last_time == NULL) goto fail;
                last_stamp = seconds;
            }
            last_text = p;
            last_length = q - p;
            if (PyList_Append(times, last_time) < 0) goto fail;
            tokens = 3;
        }
    line_end:
        if (shape == 0) shape = tokens;
        if (tokens != shape) goto unsure;
        if (q == limit) break;
        if (*q != '\n') goto unsure;
        p = q + 1;
    }
    if (reference != NULL) {
        if (ref != NULL) goto unsure; /* the reference has more lines */
    } else if (_PyBytes_Resize(&labels, written) < 0) {
        goto fail;
    }
    PyObject *smallest = PyFloat_FromDouble(least);
    if (smallest == NULL) goto fail;
    result = PyTuple_Pack(4, labels, values, shape == 2 ? Py_None : times, smallest);
    Py_DECREF(smallest);
    goto done;
unsure:
    result = Py_NewRef(Py_None);
    goto done;
fail:
    result = NULL;
done:
    Py_XDECREF(labels);
    Py_XDECREF(values);
    Py_XDECREF(times);
    Py_XDECREF(last_time);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_run", (PyCFunction)(void (*)(void))scan_run, METH_FASTCALL,
     "scan_run(body, start, end, head[, reference, reference_head]): (labels, values, times or "
     "None) of one canonical run of kubelet series lines, or None when the text is not exactly "
     "that. With a reference run's label text, its lines must name the same series in the same "
     "order (the same text after the heads) and the labels returned are the reference."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", NULL, 0, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
