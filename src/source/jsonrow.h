/*
 * Manifest rows: the one tokenizer for the `.jsonl` rows of tables
 * (table.c) and of path,label manifests (manifest.c), and the bounded
 * output buffer the CSV reader shares. Not JSON: a stated subset, on
 * purpose (docs/json.md measured jansson at +365 % and cJSON at +63 % of
 * the index time on a million rows):
 *
 *   row     = ws "{" ws [ member *( ws "," ws member ) ] ws "}" ws
 *   member  = string ws ":" ws value          (keys unique in a row)
 *   value   = string / number / list
 *   list    = "[" ws "]"
 *           / "[" ws string *( ws "," ws string ) ws "]"
 *           / "[" ws number *( ws "," ws number ) ws "]"
 *   string  = a JSON string (RFC 8259): every escape, \uXXXX with
 *             surrogate pairs decoded to UTF-8; valid UTF-8, no control
 *             characters
 *   number  = a JSON number (RFC 8259), at most 63 characters
 *   ws      = *( " " / "\t" / "\r" )          (a row is one line)
 *
 * Anything else — an object or a list inside a row, a list mixing strings
 * and numbers, true, false, null, a duplicate key, more than
 * SL__JROW_MEMBERS members or SL__JROW_KEYS bytes of keys — is an error
 * naming the key where there is one. Nothing allocates: a parsed row is
 * spans into the line plus its decoded keys, in a caller-owned sl__jrow
 * (~10 KiB); values are decoded on demand through bounded buffers.
 */
#ifndef SL_JSONROW_H
#define SL_JSONROW_H

#include <stddef.h>
#include <stdint.h>

/* A bounded output buffer: bytes past cap-1 are dropped and noted. */
typedef struct sl__obuf {
    char *p;
    size_t cap, len;
    int trunc;
} sl__obuf;

static inline void sl__obuf_put(sl__obuf *o, char c) {
    if (o->len + 1 < o->cap) o->p[o->len++] = c;
    else o->trunc = 1;
}

enum { SL__JV_STRING = 1, SL__JV_NUMBER, SL__JV_STRINGS, SL__JV_NUMBERS, SL__JV_EMPTY /* [] */ };

#define SL__JROW_MEMBERS 256
#define SL__JROW_KEYS 4096

typedef struct sl__jmember {
    uint32_t key_off, key_len; /* the decoded key: row->keys[key_off, + key_len) */
    uint32_t val_off, val_len; /* the value's text: line[val_off, + val_len) */
    uint32_t count;            /* list elements (1 for a scalar) */
    int type;                  /* SL__JV_* */
    int is_int;                /* a number without fraction or exponent */
} sl__jmember;

typedef struct sl__jrow {
    const char *line;
    uint32_t n;
    sl__jmember m[SL__JROW_MEMBERS];
    size_t keys_len;
    char keys[SL__JROW_KEYS];
} sl__jrow;

/* The line of t[0, n) starting at i: its end (the first LF or CR at or
 * after i, or n), and in *next where the next line starts: line ends are
 * LF, CRLF or a lone CR (old Mac files, some exports), as the CSV reader
 * takes them. */
size_t sl__jrow_line(const char *t, size_t n, size_t i, size_t *next);
/* Parse line[0, len) (no '\n' inside) into row. 0, or -1 with a reason in
 * err ("\"key\": ..." where a key is known; the caller adds the line). */
int sl__jrow_parse(const char *line, size_t len, sl__jrow *row, char *err, size_t errlen);
/* The member answering keys (';'-separated alternatives, the first one
 * present wins), or NULL. */
const sl__jmember *sl__jrow_find(const sl__jrow *row, const char *keys);
/* The member's key as a C string is not kept: this writes it (cut to fit). */
void sl__jrow_key(const sl__jrow *row, const sl__jmember *m, char *buf, size_t len);

/* Walking a value's elements (a scalar is one element). The row parsed
 * them: they are well-formed, so the walk cannot fail but by truncation. */
typedef struct sl__jiter {
    const char *p, *e;
} sl__jiter;
void sl__jrow_iter(const sl__jrow *row, const sl__jmember *m, sl__jiter *it);
/* The next element, a string, decoded into o (o->trunc set if cut). */
void sl__jiter_string(sl__jiter *it, sl__obuf *o);
/* The next element, a number, as a double (strtod's rounding). */
double sl__jiter_number(sl__jiter *it);
/* A scalar integer member in int64 range: 0, or -1 (not one). */
int sl__jrow_int(const sl__jrow *row, const sl__jmember *m, int64_t *out);

#endif
