/* SPDX-License-Identifier: MIT */
/* Typed configuration tables (util/conf.h). */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/conf.h"

static int why_set(char *why, size_t whylen, int r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int why_set(char *why, size_t whylen, int r, const char *fmt, ...)
{
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return r;
}

/* ---- numbers ----------------------------------------------------------- */

/* Decimal or 0x hexadecimal, optionally signed; never octal ("010" is ten). */
static bool parse_number(const char *s, bool is_signed, long long *ret)
{
    const char *p = s;
    bool neg = false;
    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    if (neg && !is_signed)
        return false;
    int base = 10;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        base = 16;
        p += 2;
    }
    if (!isxdigit((unsigned char)*p) || (base == 10 && !isdigit((unsigned char)*p)))
        return false;
    char *end;
    errno = 0;
    unsigned long long u = strtoull(p, &end, base);
    if (errno || *end || u > (unsigned long long)LLONG_MAX + neg)
        return false;
    *ret = neg ? (long long)(0 - u) : (long long)u;
    return true;
}

static void store_int(void *dst, size_t size, bool is_signed, long long v)
{
    if (is_signed) {
        int8_t i8 = (int8_t)v;
        int16_t i16 = (int16_t)v;
        int32_t i32 = (int32_t)v;
        int64_t i64 = v;
        memcpy(dst, size == 1 ? (void *)&i8 : size == 2 ? (void *)&i16
                    : size == 4 ? (void *)&i32 : (void *)&i64, size);
    } else {
        uint8_t u8 = (uint8_t)v;
        uint16_t u16 = (uint16_t)v;
        uint32_t u32 = (uint32_t)v;
        uint64_t u64 = (uint64_t)v;
        memcpy(dst, size == 1 ? (void *)&u8 : size == 2 ? (void *)&u16
                    : size == 4 ? (void *)&u32 : (void *)&u64, size);
    }
}

static long long load_int(const void *src, size_t size, bool is_signed)
{
    if (is_signed) {
        int8_t i8;
        int16_t i16;
        int32_t i32;
        int64_t i64;
        switch (size) {
        case 1: memcpy(&i8, src, 1); return i8;
        case 2: memcpy(&i16, src, 2); return i16;
        case 4: memcpy(&i32, src, 4); return i32;
        default: memcpy(&i64, src, 8); return i64;
        }
    }
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    switch (size) {
    case 1: memcpy(&u8, src, 1); return u8;
    case 2: memcpy(&u16, src, 2); return u16;
    case 4: memcpy(&u32, src, 4); return u32;
    default: memcpy(&u64, src, 8); return (long long)u64;
    }
}

static bool parse_bool(const char *s, bool *ret)
{
    static const char *const yes[] = {"yes", "true", "on", "1"}, *const no[] = {"no", "false",
                                                                               "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i]) || !strcasecmp(s, no[i])) {
            *ret = !strcasecmp(s, yes[i]);
            return true;
        }
    }
    return false;
}

static int enum_value(const struct rrpci_conf_field *f, size_t i)
{
    return f->values ? f->values[i] : (int)i;
}

/* ---- describing -------------------------------------------------------- */

void rrpci_conf_describe(const struct rrpci_conf_field *f, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    switch (f->type) {
    case RRPCI_CONF_T_INT:
    case RRPCI_CONF_T_UINT:
        snprintf(buf, len, "a number from %lld to %lld", f->min, f->max);
        break;
    case RRPCI_CONF_T_BOOL:
        snprintf(buf, len, "yes or no");
        break;
    case RRPCI_CONF_T_ENUM:
        for (size_t i = 0; f->names[i] && n < len; i++) {
            int w = snprintf(buf + n, len - n, "%s%s", i == 0 ? "one of " : ", ", f->names[i]);
            n += w > 0 ? (size_t)w : 0;
        }
        break;
    case RRPCI_CONF_T_TEXT:
        snprintf(buf, len, "text of at most %zu bytes", f->size - 1);
        break;
    case RRPCI_CONF_T_CUSTOM:
        break;
    }
}

void rrpci_conf_default_text(const struct rrpci_conf_field *f, char *buf, size_t len)
{
    if (f->def_doc) {
        snprintf(buf, len, "%s", f->def_doc);
        return;
    }
    switch (f->type) {
    case RRPCI_CONF_T_INT:
    case RRPCI_CONF_T_UINT:
        snprintf(buf, len, "%lld", f->def);
        break;
    case RRPCI_CONF_T_BOOL:
        snprintf(buf, len, "%s", f->def ? "yes" : "no");
        break;
    case RRPCI_CONF_T_ENUM:
        buf[0] = 0;
        for (size_t i = 0; f->names[i]; i++)
            if (enum_value(f, i) == f->def) {
                snprintf(buf, len, "%s", f->names[i]);
                break;
            }
        break;
    case RRPCI_CONF_T_TEXT:
    case RRPCI_CONF_T_CUSTOM:
        snprintf(buf, len, "%s", f->def_text ? f->def_text : "");
        break;
    }
}

/* ---- setting ----------------------------------------------------------- */

int rrpci_conf_set_field(const struct rrpci_conf_field *f, void *obj, const char *value,
                         char *why, size_t whylen)
{
    char *dst = (char *)obj + f->offset;
    char range[300];
    switch (f->type) {
    case RRPCI_CONF_T_INT:
    case RRPCI_CONF_T_UINT: {
        long long v;
        if (!parse_number(value, f->type == RRPCI_CONF_T_INT, &v) || v < f->min || v > f->max) {
            rrpci_conf_describe(f, range, sizeof(range));
            return why_set(why, whylen, -EINVAL, "not %s", range);
        }
        store_int(dst, f->size, f->type == RRPCI_CONF_T_INT, v);
        return 0;
    }
    case RRPCI_CONF_T_BOOL: {
        bool b;
        if (!parse_bool(value, &b))
            return why_set(why, whylen, -EINVAL, "not yes or no (true/false, on/off, 1/0)");
        memcpy(dst, &b, sizeof(b));
        return 0;
    }
    case RRPCI_CONF_T_ENUM:
        for (size_t i = 0; f->names[i]; i++) {
            if (strcmp(value, f->names[i]) == 0) {
                if (f->size == sizeof(bool)) {
                    bool b = enum_value(f, i) != 0;
                    memcpy(dst, &b, sizeof(b));
                } else {
                    store_int(dst, f->size, true, enum_value(f, i));
                }
                return 0;
            }
        }
        rrpci_conf_describe(f, range, sizeof(range));
        return why_set(why, whylen, -EINVAL, "not %s", range);
    case RRPCI_CONF_T_TEXT: {
        size_t n = strlen(value);
        if (n >= f->size)
            return why_set(why, whylen, -EINVAL, "longer than %zu bytes", f->size - 1);
        if (f->check) {
            int r = f->check(value, why, whylen);
            if (r < 0)
                return r;
        }
        memcpy(dst, value, n + 1);
        return 0;
    }
    case RRPCI_CONF_T_CUSTOM:
        return f->parse(obj, value, why, whylen);
    }
    return why_set(why, whylen, -EINVAL, "field of an unknown type");
}

const struct rrpci_conf_field *rrpci_conf_find(const struct rrpci_conf_table *t,
                                               const char *name)
{
    size_t pl = t->prefix ? strlen(t->prefix) : 0;
    for (size_t i = 0; name && i < t->nfields; i++) {
        const char *fn = t->fields[i].name;
        if (strcasecmp(name, fn) == 0 ||
            (pl && strncasecmp(fn, t->prefix, pl) == 0 && strcasecmp(name, fn + pl) == 0))
            return &t->fields[i];
    }
    return NULL;
}

int rrpci_conf_set(const struct rrpci_conf_table *t, void *obj, const char *name,
                   const char *value, char *why, size_t whylen)
{
    const struct rrpci_conf_field *f = rrpci_conf_find(t, name);
    if (f)
        return rrpci_conf_set_field(f, obj, value, why, whylen);
    const char *near = rrpci_conf_suggest(&t, 1, name);
    if (near)
        return why_set(why, whylen, -ENOENT, "did you mean %s?", near);
    return why_set(why, whylen, -ENOENT, "no such name");
}

static const char *unprefixed(const struct rrpci_conf_table *t, const char *name)
{
    size_t pl = t->prefix ? strlen(t->prefix) : 0;
    return pl && strncasecmp(name, t->prefix, pl) == 0 ? name + pl : name;
}

int rrpci_conf_check_table(const struct rrpci_conf_table *t, char *why, size_t whylen)
{
    for (size_t i = 0; i < t->nfields; i++) {
        const struct rrpci_conf_field *f = &t->fields[i];
        if (f->offset + f->size > t->size)
            return why_set(why, whylen, -EINVAL, "%s: outside the struct", f->name);
        if (rrpci_conf_find(t, f->name) != f ||
            rrpci_conf_find(t, unprefixed(t, f->name)) != f)
            return why_set(why, whylen, -EINVAL, "%s: another field has its name", f->name);
        bool in = true;
        if (f->type == RRPCI_CONF_T_INT || f->type == RRPCI_CONF_T_UINT)
            in = f->min <= f->def && f->def <= f->max;
        if (f->type == RRPCI_CONF_T_ENUM) {
            in = false;
            for (size_t k = 0; f->names[k]; k++)
                in = in || enum_value(f, k) == f->def;
        }
        if (f->type == RRPCI_CONF_T_TEXT)
            in = !f->def_text || strlen(f->def_text) < f->size;
        if (!in)
            return why_set(why, whylen, -EINVAL, "%s: its default is not a value it takes",
                           f->name);
    }
    return 0;
}

int rrpci_conf_defaults(const struct rrpci_conf_table *t, void *obj)
{
    for (size_t i = 0; i < t->nfields; i++) {
        const struct rrpci_conf_field *f = &t->fields[i];
        char *dst = (char *)obj + f->offset;
        switch (f->type) {
        case RRPCI_CONF_T_INT:
        case RRPCI_CONF_T_UINT:
            store_int(dst, f->size, f->type == RRPCI_CONF_T_INT, f->def);
            break;
        case RRPCI_CONF_T_BOOL: {
            bool b = f->def != 0;
            memcpy(dst, &b, sizeof(b));
            break;
        }
        case RRPCI_CONF_T_ENUM:
            if (f->size == sizeof(bool)) {
                bool b = f->def != 0;
                memcpy(dst, &b, sizeof(b));
            } else {
                store_int(dst, f->size, true, f->def);
            }
            break;
        case RRPCI_CONF_T_TEXT:
            snprintf(dst, f->size, "%s", f->def_text ? f->def_text : "");
            break;
        case RRPCI_CONF_T_CUSTOM:
            if (f->def_text && f->def_text[0]) {
                int r = f->parse(obj, f->def_text, NULL, 0);
                if (r < 0)
                    return r;
            }
            break;
        }
    }
    return 0;
}

int rrpci_conf_from_env(const struct rrpci_conf_table *t, void *obj, char *why, size_t whylen)
{
    for (size_t i = 0; i < t->nfields; i++) {
        const struct rrpci_conf_field *f = &t->fields[i];
        const char *s = f->flags & RRPCI_CONF_NO_ENV ? NULL : getenv(f->name);
        if (!s || !*s)
            continue;
        char reason[400];
        int r = rrpci_conf_set_field(f, obj, s, reason, sizeof(reason));
        if (r < 0)
            return why_set(why, whylen, r, "%s=\"%s\": %s", f->name, s, reason);
    }
    return 0;
}

long long rrpci_conf_number(const struct rrpci_conf_field *f, const void *obj)
{
    const char *src = (const char *)obj + f->offset;
    switch (f->type) {
    case RRPCI_CONF_T_INT:
    case RRPCI_CONF_T_UINT:
        return load_int(src, f->size, f->type == RRPCI_CONF_T_INT);
    case RRPCI_CONF_T_BOOL: {
        bool b;
        memcpy(&b, src, sizeof(b));
        return b;
    }
    case RRPCI_CONF_T_ENUM:
        if (f->size == sizeof(bool)) {
            bool b;
            memcpy(&b, src, sizeof(b));
            return b;
        }
        return load_int(src, f->size, true);
    default:
        return 0;
    }
}

/* ---- did you mean ------------------------------------------------------ */

#define DIST_MAX 64 /* longer names are not compared */

size_t rrpci_conf_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la >= DIST_MAX || lb >= DIST_MAX)
        return SIZE_MAX;
    /* Optimal string alignment: insertions, deletions, substitutions and
     * transpositions of neighbours cost one each.  d[i][j]: a[..i] to b[..j]. */
    unsigned short d[DIST_MAX][DIST_MAX];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (unsigned short)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (unsigned short)j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            unsigned short best = (unsigned short)(d[i - 1][j - 1] + (ca != cb));
            if (d[i - 1][j] + 1 < best)
                best = (unsigned short)(d[i - 1][j] + 1);
            if (d[i][j - 1] + 1 < best)
                best = (unsigned short)(d[i][j - 1] + 1);
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && d[i - 2][j - 2] + 1 < best)
                best = (unsigned short)(d[i - 2][j - 2] + 1);
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

const char *rrpci_conf_suggest(const struct rrpci_conf_table *const *tables, size_t n,
                               const char *name)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t k = 0; name && k < n; k++) {
        const char *want = unprefixed(tables[k], name);
        size_t limit = strlen(want) / 3 > 2 ? strlen(want) / 3 : 2;
        for (size_t i = 0; i < tables[k]->nfields; i++) {
            const char *fn = tables[k]->fields[i].name;
            size_t d = rrpci_conf_distance(want, unprefixed(tables[k], fn));
            if (d <= limit && d < best_d) {
                best_d = d;
                best = fn;
            }
        }
    }
    return best;
}

/* ---- printing ---------------------------------------------------------- */

/* Writes @s for scdoc: its formatting characters escaped. */
static void scdoc_text(FILE *fp, const char *s)
{
    for (; *s; s++) {
        if (*s == '*' || *s == '_' || *s == '\\')
            fputc('\\', fp);
        fputc(*s, fp);
    }
}

/* @doc wrapped to lines of at most @width columns, each after @indent. */
static void wrapped(FILE *fp, const char *indent, size_t width, const char *doc, bool scdoc)
{
    const char *p = doc;
    while (*p) {
        size_t n = strlen(p);
        if (n > width) {
            /* A break before '-', '[', '|', '+', '.' or '\'' would start a
             * line that scdoc or roff reads as markup: break earlier. */
            n = width;
            while (n > 0 && (p[n] != ' ' || (scdoc && strchr("-[|+.'", p[n + 1]))))
                n--;
            if (n == 0)
                n = strcspn(p, " ");
        }
        char line[512];
        snprintf(line, sizeof(line), "%.*s", (int)(n < sizeof(line) ? n : sizeof(line) - 1), p);
        fputs(indent, fp);
        if (scdoc)
            scdoc_text(fp, line);
        else
            fputs(line, fp);
        fputc('\n', fp);
        p += n;
        while (*p == ' ')
            p++;
    }
}

/* The values @f takes, short, for the printed lists: "1..64", "yes or no". */
static void range_short(const struct rrpci_conf_field *f, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    if (f->type == RRPCI_CONF_T_INT || f->type == RRPCI_CONF_T_UINT) {
        snprintf(buf, len, "%lld..%lld", f->min, f->max);
    } else if (f->type == RRPCI_CONF_T_BOOL) {
        snprintf(buf, len, "yes or no");
    } else if (f->type == RRPCI_CONF_T_ENUM) {
        for (size_t i = 0; f->names[i] && n < len; i++) {
            int w = snprintf(buf + n, len - n, "%s%s", i == 0 ? "" : f->names[i + 1] ? ", "
                                                                                     : " or ",
                             f->names[i]);
            n += w > 0 ? (size_t)w : 0;
        }
    }
}

void rrpci_conf_print(const struct rrpci_conf_table *t, FILE *fp, enum rrpci_conf_style style)
{
    for (size_t i = 0; i < t->nfields; i++) {
        const struct rrpci_conf_field *f = &t->fields[i];
        char def[300], range[300], head[700], doc[1200];
        rrpci_conf_default_text(f, def, sizeof(def));
        range_short(f, range, sizeof(range));
        snprintf(head, sizeof(head), "default: %s%s%s%s", def[0] ? def : "none",
                 range[0] ? "; " : "", range, f->flags & RRPCI_CONF_REPEAT ? "; repeatable" : "");
        snprintf(doc, sizeof(doc), "%s%s", f->doc,
                 f->flags & RRPCI_CONF_NO_ENV ? " (set from code only, never from the "
                                                "environment)"
                                              : "");
        switch (style) {
        case RRPCI_CONF_PLAIN:
            fprintf(fp, "%-30s %s\n", f->name, head);
            wrapped(fp, "    ", 74, doc, false);
            break;
        case RRPCI_CONF_HELP:
            fprintf(fp, "  %s (%s)\n", f->name, head);
            wrapped(fp, "      ", 72, doc, false);
            break;
        case RRPCI_CONF_SCDOC:
            fputc('*', fp);
            scdoc_text(fp, f->name);
            fputs("* (", fp);
            scdoc_text(fp, head);
            fputs(")\n", fp);
            wrapped(fp, "\t", 70, doc, true);
            if (i + 1 < t->nfields)
                fputc('\n', fp);
            break;
        }
    }
}
