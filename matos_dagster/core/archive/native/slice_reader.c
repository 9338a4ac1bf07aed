/* The native slice reader: one Kafka partition's slice straight into Arrow buffers.
 *
 * The same loop as slice_task.archive_slice's Python one (its own consumer, assign at the
 * slice start, read until the position reaches the slice end, a stall timeout, a size limit
 * per record), but no Python object per record: records are copied from librdkafka's
 * messages into growing column buffers, and every chunk is handed up as one Arrow struct
 * array through the Arrow C Data Interface (pyarrow imports it without a copy). Chunks and
 * objects end at exactly the records where records.Batch and the Python loop end them, so
 * the written objects are byte-identical. Called through ctypes (the GIL is released for
 * the whole call); no Python.h, so a plain `cc` builds it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>
#include <librdkafka/rdkafka.h>

/* ---- the Arrow C Data Interface (https://arrow.apache.org/docs/format/CDataInterface.html) */
struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

/* Results of sr_next, shared with Python (ctypes mirrors this struct). */
#define SR_CHUNK 1       /* `out` holds a chunk; object_end says whether its object ends with it */
#define SR_OBJECT_END 2  /* no chunk: the object ended with the previous chunk */
#define SR_DONE 0        /* the slice is read; nothing in `out` */
#define SR_KAFKA_ERROR -1
#define SR_TOO_LARGE -2
#define SR_STUCK -3
#define SR_BAD_RECORD -4
#define SR_NO_MEMORY -5

typedef struct {
    int64_t rows, nbytes, largest, first_offset, last_offset, min_ts, max_ts;
    int32_t has_ts, object_end;
    int32_t err_code;                       /* librdkafka's error code (SR_KAFKA_ERROR) */
    int32_t pad;
    int64_t err_offset, err_size, position; /* SR_TOO_LARGE: offset, size; SR_STUCK: position */
    char errstr[512];
} sr_result;

/* ---- growing buffers */
typedef struct {
    uint8_t *p;
    size_t len, cap;
} buf_t;

static int buf_reserve(buf_t *b, size_t more) {
    if (b->len + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(buf_t *b, const void *data, size_t n) {
    if (buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

static void *buf_take(buf_t *b) { /* hand the memory over (to an Arrow array), start empty */
    void *p = b->p;
    if (!p) p = malloc(8); /* Arrow wants a non-null pointer for a data buffer, even if empty */
    b->p = NULL;
    b->len = b->cap = 0;
    return p;
}

/* A variable-size column (string or binary): int32 offsets, data, validity. */
typedef struct {
    buf_t offsets, data, valid;
    int64_t n, nulls;
} varcol_t;

static int bit_set(buf_t *valid, int64_t i, int on) {
    if ((size_t)(i / 8) >= valid->len) {
        uint8_t zero = 0;
        if (buf_put(valid, &zero, 1)) return -1;
    }
    if (on) valid->p[i / 8] |= (uint8_t)(1u << (i % 8));
    return 0;
}

static int varcol_add(varcol_t *c, const void *data, size_t n, int is_null) {
    if (c->offsets.len == 0) {
        int32_t zero = 0;
        if (buf_put(&c->offsets, &zero, 4)) return -1;
    }
    if (!is_null && buf_put(&c->data, data, n)) return -1;
    int32_t end = (int32_t)c->data.len;
    if (buf_put(&c->offsets, &end, 4)) return -1;
    if (bit_set(&c->valid, c->n, !is_null)) return -1;
    c->nulls += is_null ? 1 : 0;
    c->n++;
    return 0;
}

/* ---- exported arrays: each node owns its buffers and its children's structs */
typedef struct {
    int n_buffers, n_children;
    const void *buffers[3];
    struct ArrowArray child_structs[8];
    struct ArrowArray *child_ptrs[8];
} node_t;

static void release_node(struct ArrowArray *a) {
    node_t *nd = a->private_data;
    for (int i = 0; i < nd->n_children; i++)
        if (nd->child_structs[i].release) nd->child_structs[i].release(&nd->child_structs[i]);
    for (int i = 0; i < nd->n_buffers; i++) free((void *)nd->buffers[i]);
    free(nd);
    a->release = NULL;
}

static node_t *make_array(struct ArrowArray *a, int64_t length, int64_t nulls, int n_buffers, int n_children) {
    node_t *nd = calloc(1, sizeof *nd);
    if (!nd) return NULL;
    nd->n_buffers = n_buffers;
    nd->n_children = n_children;
    for (int i = 0; i < n_children; i++) nd->child_ptrs[i] = &nd->child_structs[i];
    memset(a, 0, sizeof *a);
    a->length = length;
    a->null_count = nulls;
    a->n_buffers = n_buffers;
    a->n_children = n_children;
    a->buffers = nd->buffers;
    a->children = n_children ? nd->child_ptrs : NULL;
    a->release = release_node;
    a->private_data = nd;
    return nd;
}

static int export_var(struct ArrowArray *a, varcol_t *c) {
    node_t *nd = make_array(a, c->n, c->nulls, 3, 0);
    if (!nd) return -1;
    if (c->offsets.len == 0) {
        int32_t zero = 0;
        if (buf_put(&c->offsets, &zero, 4)) return -1;
    }
    if (c->nulls) {
        nd->buffers[0] = buf_take(&c->valid);
    } else {
        free(c->valid.p);
        c->valid = (buf_t){0};
    }
    nd->buffers[1] = buf_take(&c->offsets);
    nd->buffers[2] = buf_take(&c->data);
    c->n = c->nulls = 0;
    return 0;
}

static int export_fixed(struct ArrowArray *a, int64_t n, buf_t *values, buf_t *valid, int64_t nulls) {
    node_t *nd = make_array(a, n, nulls, 2, 0);
    if (!nd) return -1;
    if (nulls) nd->buffers[0] = buf_take(valid);
    else if (valid) {
        free(valid->p);
        *valid = (buf_t){0};
    }
    nd->buffers[1] = buf_take(values);
    return 0;
}

/* ---- the reader */
typedef struct {
    rd_kafka_t *rk;
    rd_kafka_queue_t *queue;
    rd_kafka_topic_partition_list_t *tp; /* for rd_kafka_position */
    char *topic;
    int32_t partition;
    int64_t start, end, max_record_bytes;
    double stall_s;

    rd_kafka_message_t **msgs;
    ssize_t nmsgs, imsg;
    int done, need_check;
    int64_t next_offset;
    double last_progress;

    int64_t obj_nbytes, chunk_start; /* record bytes in the current object; where its chunk began */
    /* the chunk's columns */
    int64_t rows, largest, first_offset, last_offset, min_ts, max_ts;
    int has_ts;
    buf_t offsets, ts, ts_valid, ts_types, header_ends;
    int64_t ts_nulls;
    varcol_t keys, values, hkeys, hvalues;
} sr_reader;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void set_err(sr_result *r, const char *msg) {
    snprintf(r->errstr, sizeof r->errstr, "%s", msg);
}

void sr_close(sr_reader *s);

sr_reader *sr_open(const char **keys, const char **values, int n, const char *topic, int32_t partition,
                   int64_t start, int64_t end, int64_t max_record_bytes, double stall_s, sr_result *r) {
    char errstr[512];
    memset(r, 0, sizeof *r);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    for (int i = 0; i < n; i++) {
        if (rd_kafka_conf_set(conf, keys[i], values[i], errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
            r->err_code = RD_KAFKA_RESP_ERR__INVALID_ARG;
            set_err(r, errstr);
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (!rk) {
        r->err_code = RD_KAFKA_RESP_ERR__INVALID_ARG;
        set_err(r, errstr);
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    sr_reader *s = calloc(1, sizeof *s);
    if (!s) {
        rd_kafka_destroy(rk);
        set_err(r, "out of memory");
        return NULL;
    }
    s->rk = rk;
    /* As confluent-kafka's Consumer: the main queue (errors, logs) is served by consume. */
    rd_kafka_poll_set_consumer(rk);
    s->queue = rd_kafka_queue_get_consumer(rk);
    s->topic = strdup(topic);
    s->partition = partition;
    s->start = start;
    s->end = end;
    s->max_record_bytes = max_record_bytes;
    s->stall_s = stall_s;
    s->next_offset = start;
    s->msgs = calloc(5000, sizeof *s->msgs);
    s->tp = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(s->tp, topic, partition)->offset = start;
    rd_kafka_resp_err_t err = rd_kafka_assign(rk, s->tp);
    if (err) {
        r->err_code = err;
        set_err(r, rd_kafka_err2str(err));
        sr_close(s);
        return NULL;
    }
    s->last_progress = now_s();
    return s;
}

static void free_msgs(sr_reader *s) {
    for (ssize_t i = s->imsg; i < s->nmsgs; i++) rd_kafka_message_destroy(s->msgs[i]);
    s->imsg = s->nmsgs = 0;
}

static void free_col(varcol_t *c) {
    free(c->offsets.p);
    free(c->data.p);
    free(c->valid.p);
    memset(c, 0, sizeof *c);
}

void sr_close(sr_reader *s) {
    if (!s) return;
    free_msgs(s);
    if (s->queue) rd_kafka_queue_destroy(s->queue);
    rd_kafka_consumer_close(s->rk);
    rd_kafka_destroy(s->rk);
    rd_kafka_topic_partition_list_destroy(s->tp);
    free(s->msgs);
    free(s->topic);
    free(s->offsets.p);
    free(s->ts.p);
    free(s->ts_valid.p);
    free(s->ts_types.p);
    free(s->header_ends.p);
    free_col(&s->keys);
    free_col(&s->values);
    free_col(&s->hkeys);
    free_col(&s->hvalues);
    free(s);
}

static int utf8_valid(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07; }
        else return 0;
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (p[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* The record's size as the Python loop counts it; -1 when a header key is not UTF-8. */
static int64_t record_size(rd_kafka_message_t *m, rd_kafka_headers_t **hdrs) {
    int64_t size = (m->key ? (int64_t)m->key_len : 0) + (m->payload ? (int64_t)m->len : 0);
    *hdrs = NULL;
    if (rd_kafka_message_headers(m, hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        *hdrs = NULL;
        return size;
    }
    const char *name;
    const void *val;
    size_t vsize;
    for (size_t i = 0; rd_kafka_header_get_all(*hdrs, i, &name, &val, &vsize) == RD_KAFKA_RESP_ERR_NO_ERROR; i++) {
        size_t nlen = strlen(name);
        if (!utf8_valid((const unsigned char *)name, nlen)) return -1;
        size += (int64_t)nlen + (val ? (int64_t)vsize : 0);
    }
    return size;
}

static int add_record(sr_reader *s, rd_kafka_message_t *m, rd_kafka_headers_t *hdrs, int64_t size) {
    int64_t off = m->offset;
    rd_kafka_timestamp_type_t tstype;
    int64_t ts = rd_kafka_message_timestamp(m, &tstype);
    int known = tstype != RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
    uint8_t t = (uint8_t)tstype;
    int64_t tsv = known ? ts : 0;
    if (buf_put(&s->offsets, &off, 8) || buf_put(&s->ts, &tsv, 8) || bit_set(&s->ts_valid, s->rows, known) ||
        buf_put(&s->ts_types, &t, 1))
        return -1;
    if (!known) s->ts_nulls++;
    if (varcol_add(&s->keys, m->key, m->key ? m->key_len : 0, m->key == NULL) ||
        varcol_add(&s->values, m->payload, m->payload ? m->len : 0, m->payload == NULL))
        return -1;
    if (hdrs) {
        const char *name;
        const void *val;
        size_t vsize;
        for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &val, &vsize) == RD_KAFKA_RESP_ERR_NO_ERROR; i++) {
            if (varcol_add(&s->hkeys, name, strlen(name), 0) || varcol_add(&s->hvalues, val, val ? vsize : 0, val == NULL))
                return -1;
        }
    }
    int32_t hend = (int32_t)s->hkeys.n;
    if (s->header_ends.len == 0) {
        int32_t zero = 0;
        if (buf_put(&s->header_ends, &zero, 4)) return -1;
    }
    if (buf_put(&s->header_ends, &hend, 4)) return -1;
    if (s->rows == 0) s->first_offset = off;
    s->last_offset = off;
    if (known) {
        if (!s->has_ts || ts < s->min_ts) s->min_ts = ts;
        if (!s->has_ts || ts > s->max_ts) s->max_ts = ts;
        s->has_ts = 1;
    }
    if (size > s->largest) s->largest = size;
    s->rows++;
    s->obj_nbytes += size;
    return 0;
}

static const char *TYPE_NAMES[] = {"NotAvailable", "CreateTime", "LogAppendTime"};

/* The chunk as one struct array of records.SCHEMA's columns; the chunk's state is reset. */
static int export_chunk(sr_reader *s, struct ArrowArray *out, sr_result *r) {
    int64_t n = s->rows;
    node_t *root = make_array(out, n, 0, 1, 8);
    if (!root) return -1;
    struct ArrowArray *c = root->child_structs;
    /* topic: the same string n times, as pa.array([topic] * n) */
    varcol_t topic = {0};
    size_t tlen = strlen(s->topic);
    for (int64_t i = 0; i < n; i++)
        if (varcol_add(&topic, s->topic, tlen, 0)) return -1;
    if (export_var(&c[0], &topic)) return -1;
    buf_t part = {0};
    for (int64_t i = 0; i < n; i++)
        if (buf_put(&part, &s->partition, 4)) return -1;
    if (export_fixed(&c[1], n, &part, NULL, 0)) return -1;
    if (export_fixed(&c[2], n, &s->offsets, NULL, 0)) return -1;
    if (export_fixed(&c[3], n, &s->ts, &s->ts_valid, s->ts_nulls)) return -1;
    varcol_t types = {0};
    for (int64_t i = 0; i < n; i++) {
        uint8_t t = s->ts_types.p[i];
        const char *name = TYPE_NAMES[t <= 2 ? t : 0]; /* a number this code does not know: NotAvailable */
        if (varcol_add(&types, name, strlen(name), 0)) return -1;
    }
    s->ts_types.len = 0;
    if (export_var(&c[4], &types)) return -1;
    if (export_var(&c[5], &s->keys)) return -1;
    if (export_var(&c[6], &s->values)) return -1;
    /* headers: list<struct<key, value>>, never null (a record without headers has an empty list) */
    if (s->header_ends.len == 0) {
        int32_t zero = 0;
        if (buf_put(&s->header_ends, &zero, 4)) return -1;
    }
    node_t *list = make_array(&c[7], n, 0, 2, 1);
    if (!list) return -1;
    list->buffers[1] = buf_take(&s->header_ends);
    node_t *st = make_array(&list->child_structs[0], s->hkeys.n, 0, 1, 2);
    if (!st) return -1;
    if (export_var(&st->child_structs[0], &s->hkeys)) return -1;
    if (export_var(&st->child_structs[1], &s->hvalues)) return -1;

    r->rows = n;
    r->nbytes = s->obj_nbytes - s->chunk_start;
    r->largest = s->largest;
    r->first_offset = s->first_offset;
    r->last_offset = s->last_offset;
    r->has_ts = s->has_ts;
    r->min_ts = s->min_ts;
    r->max_ts = s->max_ts;
    s->rows = s->largest = 0;
    s->has_ts = 0;
    s->ts_nulls = 0;
    s->chunk_start = s->obj_nbytes;
    return 0;
}

/* The next chunk of the slice (see SR_*). A chunk ends where records.Batch.add would seal one
 * (its record bytes reach chunk_bytes); an object ends before the record that would take it
 * past object_bytes (if it holds any), as in the Python loop. */
int sr_next(sr_reader *s, int64_t object_bytes, int64_t chunk_bytes, struct ArrowArray *out, sr_result *r) {
    memset(r, 0, sizeof *r);
    for (;;) {
        while (!s->done && s->imsg < s->nmsgs) {
            rd_kafka_message_t *m = s->msgs[s->imsg];
            if (m->err) {
                if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                    /* Nothing more is readable now; past our end, the offsets left were
                     * markers or aborted records: done. */
                    if (m->offset >= s->end) {
                        s->done = 1;
                        break;
                    }
                    rd_kafka_message_destroy(m);
                    s->imsg++;
                    continue;
                }
                r->err_code = m->err;
                set_err(r, rd_kafka_message_errstr(m));
                return SR_KAFKA_ERROR;
            }
            if (m->offset >= s->end) {
                s->done = 1;
                break;
            }
            s->next_offset = m->offset + 1;
            rd_kafka_headers_t *hdrs;
            int64_t size = record_size(m, &hdrs);
            if (size < 0) {
                r->err_offset = m->offset;
                set_err(r, "a header key is not UTF-8");
                return SR_BAD_RECORD;
            }
            if (size > s->max_record_bytes) {
                r->err_offset = m->offset;
                r->err_size = size;
                return SR_TOO_LARGE;
            }
            if (s->obj_nbytes && s->obj_nbytes + size > object_bytes) {
                /* this record starts the next object */
                if (s->rows) {
                    if (export_chunk(s, out, r)) return SR_NO_MEMORY;
                    s->obj_nbytes = s->chunk_start = 0;
                    r->object_end = 1;
                    return SR_CHUNK;
                }
                s->obj_nbytes = s->chunk_start = 0;
                r->object_end = 1;
                return SR_OBJECT_END;
            }
            if (add_record(s, m, hdrs, size)) return SR_NO_MEMORY;
            rd_kafka_message_destroy(m);
            s->imsg++;
            if (s->obj_nbytes - s->chunk_start >= chunk_bytes) {
                if (export_chunk(s, out, r)) return SR_NO_MEMORY;
                return SR_CHUNK;
            }
        }
        if (s->done) {
            free_msgs(s);
            if (s->rows) {
                if (export_chunk(s, out, r)) return SR_NO_MEMORY;
                s->obj_nbytes = s->chunk_start = 0;
                r->object_end = 1;
                return SR_CHUNK;
            }
            if (s->obj_nbytes) {
                s->obj_nbytes = s->chunk_start = 0;
                r->object_end = 1;
                return SR_OBJECT_END;
            }
            return SR_DONE;
        }
        /* the batch is read: where are we? */
        s->imsg = s->nmsgs = 0;
        if (s->need_check) {
            s->need_check = 0;
            rd_kafka_position(s->rk, s->tp);
            int64_t position = s->tp->elems[0].offset;
            if (position >= s->end) {
                s->done = 1;
                continue;
            }
            if (now_s() - s->last_progress > s->stall_s) {
                r->position = position > s->start ? position : s->start;
                return SR_STUCK;
            }
        }
        int64_t remaining = s->end - s->next_offset;
        size_t want = (size_t)(remaining < 1 ? 1 : remaining > 5000 ? 5000 : remaining);
        ssize_t got = rd_kafka_consume_batch_queue(s->queue, 1000, s->msgs, want);
        if (got < 0) {
            rd_kafka_resp_err_t err = rd_kafka_last_error();
            r->err_code = err;
            set_err(r, rd_kafka_err2str(err));
            return SR_KAFKA_ERROR;
        }
        s->nmsgs = got;
        s->need_check = 1;
        if (got) s->last_progress = now_s();
    }
}

/* Release an exported chunk that Python did not import (an error between export and import). */
void sr_release(struct ArrowArray *a) {
    if (a && a->release) a->release(a);
}
