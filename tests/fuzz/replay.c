/* SPDX-License-Identifier: MIT */
/*
 * The replay driver: runs every file named on the command line (or found in
 * a directory named there, sorted) through LLVMFuzzerTestOneInput once.  It
 * is linked with each harness in every build, with any compiler, so the seed
 * corpora and the crash reproducers in tests/fuzz/corpus are regression tests
 * (meson test --suite fuzz), under ASan too.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 4096) {
            cap = cap ? cap * 2 : 8192;
            uint8_t *n = realloc(buf, cap);
            if (!n) {
                fclose(f);
                free(buf);
                return -1;
            }
            buf = n;
        }
        size_t k = fread(buf + len, 1, cap - len, f);
        len += k;
        if (k == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        fprintf(stderr, "replay: %s: read error\n", path);
        free(buf);
        return -1;
    }
    /* An exact-size copy, so ASan catches a read one past the input. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    if (len)
        memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_path(const char *path, int *count)
{
    struct stat st;
    if (stat(path, &st)) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        (*count)++;
        return run_file(path);
    }
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char **nn = realloc(names, (n + 1) * sizeof(*nn));
        if (!nn)
            break;
        names = nn;
        size_t l = strlen(path) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(l)))
            break;
        snprintf(names[n], l, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof(*names), cmp);
    int r = 0;
    for (size_t i = 0; i < n; i++) {
        if (run_path(names[i], count))
            r = -1;
        free(names[i]);
    }
    free(names);
    return r;
}

int main(int argc, char **argv)
{
    int count = 0, r = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++)
        if (run_path(argv[i], &count))
            r = 1;
    printf("replayed %d inputs%s\n", count, r ? " (with errors)" : "");
    if (count == 0) {
        fprintf(stderr, "replay: no inputs\n");
        return 1;
    }
    return r;
}
