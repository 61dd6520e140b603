/* SPDX-License-Identifier: MIT */
/*
 * Typed configuration tables: one table per component (the library's core,
 * each transport, rrpcd) describes the fields of one C struct -- each
 * field's name, type, default, range and meaning, and where in the struct
 * its value is kept.  From the table alone: defaults, values from the
 * environment or from text ("name = value"), checks with an error that
 * names the range or the closest known name, and the printed list (plain
 * for --help, scdoc for the man pages).
 *
 * Pure code over caller-owned memory: no globals, no allocation, no
 * logging.  Built into libroce_rpc and, as the static library rrpc_conf
 * (libroce_rpc/meson.build), into rrpcd.
 */
#ifndef RRPCI_UTIL_CONF_H
#define RRPCI_UTIL_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum rrpci_conf_type {
    RRPCI_CONF_T_INT,    /* a signed integer member (int, long, int64_t) */
    RRPCI_CONF_T_UINT,   /* an unsigned integer member (unsigned, uint32_t, size_t) */
    RRPCI_CONF_T_BOOL,   /* a bool member: yes/no, true/false, on/off, 1/0 */
    RRPCI_CONF_T_ENUM,   /* an int or bool member: one of @names, stored as @values */
    RRPCI_CONF_T_TEXT,   /* a char array member; @check (if any) accepts the value */
    RRPCI_CONF_T_CUSTOM, /* @parse stores it (repeatable lists, values of several fields) */
};

/* Flags of a field. */
#define RRPCI_CONF_NO_ENV 0x1u /* never read from the environment (set from code only) */
#define RRPCI_CONF_REPEAT 0x2u /* each line adds to the value (a list) */

struct rrpci_conf_field {
    const char *name; /* "RRPC_MAX_MSG"; matched case-insensitively (see rrpci_conf_find) */
    enum rrpci_conf_type type;
    size_t offset, size;     /* the member (RRPCI_CONF_INT and the other makers below) */
    long long def, min, max; /* numbers, BOOL (0/1) and ENUM (a value of @values) */
    const char *def_text;    /* TEXT and CUSTOM: the default ("": empty / none) */
    const char *def_doc;     /* printed instead of the default when set ("the cert file") */
    const char *const *names; /* ENUM: the accepted words, NULL-ended */
    const int *values;        /* ENUM: what each word stores (NULL: its index) */
    /* TEXT: NULL, or 0 when @value may be stored, else a negative errno with
     * the reason in @why. */
    int (*check)(const char *value, char *why, size_t whylen);
    /* CUSTOM: parses @value into @obj (the whole struct); 0 or a negative
     * errno with the reason in @why.  Must leave @obj unchanged on error. */
    int (*parse)(void *obj, const char *value, char *why, size_t whylen);
    unsigned flags; /* RRPCI_CONF_NO_ENV, RRPCI_CONF_REPEAT */
    const char *doc;
};

struct rrpci_conf_table {
    const char *name;   /* the component: "core", "verbs", "rrpcd" */
    const char *prefix; /* dropped in the short form of a name ("RRPC_"); NULL: none */
    const struct rrpci_conf_field *fields;
    size_t nfields;
    size_t size; /* of the struct the fields are members of */
};

#define RRPCI_CONF_NFIELDS(a) (sizeof(a) / sizeof((a)[0]))

/* ---- making fields: the member's C type is checked at compile time ---- */

#define RRPCI_CONF_ASSERT_(cond)                                                                \
    (0 * sizeof(struct {                                                                        \
         _Static_assert(cond, "the member's C type does not match the field's type");         \
         int rrpci_conf_unused;                                                                 \
     }))
#define RRPCI_CONF_MEMBER_(S, m) (((S *)0)->m)
#define RRPCI_CONF_AT_(S, m, ok)                                                                \
    .offset = offsetof(S, m) + RRPCI_CONF_ASSERT_(ok), .size = sizeof(RRPCI_CONF_MEMBER_(S, m))
#define RRPCI_CONF_IS_SIGNED_(x)                                                                \
    _Generic((x), signed char: 1, short: 1, int: 1, long: 1, long long: 1, default: 0)
#define RRPCI_CONF_IS_UNSIGNED_(x)                                                              \
    _Generic((x), unsigned char: 1, unsigned short: 1, unsigned: 1, unsigned long: 1,          \
             unsigned long long: 1, default: 0)

/* Field @m of struct @S as the given type; the rest of the field follows in
 * designated initializers (.name, .def, .min, .max, .doc, ...). */
#define RRPCI_CONF_INT(S, m)                                                                    \
    .type = RRPCI_CONF_T_INT, RRPCI_CONF_AT_(S, m, RRPCI_CONF_IS_SIGNED_(RRPCI_CONF_MEMBER_(S, m)))
#define RRPCI_CONF_UINT(S, m)                                                                   \
    .type = RRPCI_CONF_T_UINT,                                                                  \
    RRPCI_CONF_AT_(S, m, RRPCI_CONF_IS_UNSIGNED_(RRPCI_CONF_MEMBER_(S, m)))
#define RRPCI_CONF_BOOL(S, m)                                                                   \
    .type = RRPCI_CONF_T_BOOL,                                                                  \
    RRPCI_CONF_AT_(S, m, _Generic(RRPCI_CONF_MEMBER_(S, m), bool: 1, default: 0))
#define RRPCI_CONF_ENUM(S, m)                                                                   \
    .type = RRPCI_CONF_T_ENUM,                                                                  \
    RRPCI_CONF_AT_(S, m, _Generic(RRPCI_CONF_MEMBER_(S, m), bool: 1, int: 1, default: 0))
#define RRPCI_CONF_TEXT(S, m)                                                                   \
    .type = RRPCI_CONF_T_TEXT,                                                                  \
    RRPCI_CONF_AT_(S, m,                                                                        \
                   _Generic(&RRPCI_CONF_MEMBER_(S, m),                                          \
                            char(*)[sizeof(RRPCI_CONF_MEMBER_(S, m))]: 1, default: 0))
#define RRPCI_CONF_CUSTOM .type = RRPCI_CONF_T_CUSTOM, .offset = 0, .size = 0

/* ---- using a table ----------------------------------------------------- */

/*
 * Stores every field's default in @obj (CUSTOM fields: @parse of a
 * non-empty def_text).  0, or the first error of a CUSTOM parse (a bug in
 * the table; its unit test calls this for every table).
 */
int rrpci_conf_defaults(const struct rrpci_conf_table *t, void *obj);

/*
 * Checks @t itself: names unique (in any case, with or without the
 * prefix), numeric defaults within their ranges, ENUM defaults among their
 * values, members inside the struct, TEXT defaults that fit.  0, or
 * -EINVAL with the first problem in @why (a bug in the table; unit tests
 * and rrpcd's start call this).
 */
int rrpci_conf_check_table(const struct rrpci_conf_table *t, char *why, size_t whylen);

/*
 * The field called @name: its full name or, when the table has a prefix,
 * the name without it ("max_conns" for "RRPC_MAX_CONNS"), in any case.
 * NULL when none.
 */
const struct rrpci_conf_field *rrpci_conf_find(const struct rrpci_conf_table *t,
                                               const char *name);

/*
 * Parses @value for @f and stores it in @obj.  0; -EINVAL (not of the
 * field's type, out of its range, refused by its check: @why says which,
 * with the range or the accepted words), or @f's own check/parse error.
 * @obj is unchanged on error.  @why may be NULL.
 */
int rrpci_conf_set_field(const struct rrpci_conf_field *f, void *obj, const char *value,
                         char *why, size_t whylen);

/*
 * rrpci_conf_find and rrpci_conf_set_field in one: -ENOENT when no field is
 * called @name, with "did you mean X?" in @why when a name is close.
 */
int rrpci_conf_set(const struct rrpci_conf_table *t, void *obj, const char *name,
                   const char *value, char *why, size_t whylen);

/*
 * For each field without RRPCI_CONF_NO_ENV whose name is set to a non-empty
 * value in the environment, rrpci_conf_set_field.  0, or the first error,
 * with "NAME=VALUE: reason" in @why.
 */
int rrpci_conf_from_env(const struct rrpci_conf_table *t, void *obj, char *why, size_t whylen);

/* The numeric value of an INT, UINT, BOOL or ENUM field (0 for the others). */
long long rrpci_conf_number(const struct rrpci_conf_field *f, const void *obj);

/*
 * The known name closest to @name (Damerau-Levenshtein distance, any case,
 * prefixes ignored) over @n tables, or NULL when none is within a third of
 * its length (at least 2 edits).  The result is a field's name.
 */
const char *rrpci_conf_suggest(const struct rrpci_conf_table *const *tables, size_t n,
                               const char *name);

/* The edit distance of @a and @b, case-insensitive (for the tests). */
size_t rrpci_conf_distance(const char *a, const char *b);

/* "a number from 1 to 1024", "yes or no", "one of err, warning, ...",
 * "text of at most 299 bytes", "" (CUSTOM) into @buf. */
void rrpci_conf_describe(const struct rrpci_conf_field *f, char *buf, size_t len);

/* The default of @f as text ("67108864", "yes", "info", "", "the cert file"). */
void rrpci_conf_default_text(const struct rrpci_conf_field *f, char *buf, size_t len);

enum rrpci_conf_style {
    RRPCI_CONF_PLAIN, /* "NAME  default: D; range\n    doc" (rrpc_config_print) */
    RRPCI_CONF_HELP,  /* "  NAME (default: D; range)\n      doc" (rrpcd --help) */
    RRPCI_CONF_SCDOC, /* "*NAME* (default: D; range)\n\tdoc" for the man pages */
};

/* Prints every field of @t in @style to @fp. */
void rrpci_conf_print(const struct rrpci_conf_table *t, FILE *fp, enum rrpci_conf_style style);

#endif
