/*
 * static module internals: HTTP dates, Range, If-None-Match, the mime.types
 * parser, and the engine's opening beneath the root (openat2 and the
 * O_NOFOLLOW walk) that it serves files with. The module is included
 * whole, under a descriptor name of its own.
 */
#define FD_API_BUILTIN fd_static_api_module_unit
#include "../../modules/fd_static_module.c"

#include <fcntl.h>
#include <sys/stat.h>

#include "fd_core.h"
#include "fd_http.h"

#include "tap.h"

static void dates(void)
{
    const time_t t = 784111777; /* Sun, 06 Nov 1994 08:49:37 GMT */
    static const char *good[] = {
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
        "Sun, 06 Nov 1994 08:49:37 GMT; length=12",
        "sun, 06 nov 1994 08:49:37 GMT",
    };
    static const char *bad[] = {
        "", "Sun", "Sun, 06 Nov 1994 08:49:37", "Sun, 06 Nov 1994 08:49 GMT",
        "Sun, 32 Jan 1994 08:49:37 GMT", "Sun, 29 Feb 1995 08:49:37 GMT",
        "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 06 Nov 1994 25:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMTX", "Sun Nov 6 08:49:37 1994",
        "1994-11-06T08:49:37Z",
    };

    for (size_t i = 0; i < fd_nelems(good); i++)
        is_int(fd_http_parse_time(good[i], strlen(good[i])), t, "date '%s'",
               good[i]);
    for (size_t i = 0; i < fd_nelems(bad); i++)
        is_int(fd_http_parse_time(bad[i], strlen(bad[i])), -1, "bad date '%s'",
               bad[i]);
    is_int(fd_http_parse_time("Thu, 01 Jan 1970 00:00:00 GMT", 29), 0, "epoch");
    is_int(fd_http_parse_time("Tue, 29 Feb 2000 12:00:00 GMT", 29), 951825600,
           "leap day 2000");
    is_int(fd_http_parse_time("Sun, 01 Jan 2040 00:00:00 GMT", 29),
           2208988800LL, "2040 (past 2038)");
}

static void range(const char *h, int64_t size, int want, int64_t ws,
                  int64_t we)
{
    fd_http_range_t rg[16];
    unsigned n = 99;
    int rc = fd_http_parse_ranges((fd_str_t){strlen(h), h}, size, rg, 16, &n);

    if (want == FD_RANGE_OK)
        ok(rc == want && n == 1 && rg[0].start == ws && rg[0].end == we,
           "'%s' of %lld: %lld-%lld (got rc %d n %u %lld-%lld)", h,
           (long long)size, (long long)ws, (long long)we, rc, n,
           (long long)rg[0].start, (long long)rg[0].end);
    else
        is_int(rc, want, "'%s' of %lld: rc %d", h, (long long)size, want);
}

/* a list: the satisfiable ranges, as "s-e s-e" */
static void list(const char *h, int64_t size, unsigned max, int want,
                 const char *text)
{
    fd_http_range_t rg[16];
    unsigned n = 99, i;
    char got[256] = "", *p = got;
    int rc = fd_http_parse_ranges((fd_str_t){strlen(h), h}, size, rg, max, &n);

    for (i = 0; rc == FD_RANGE_OK && i < n; i++)
        p += sprintf(p, "%s%lld-%lld", i ? " " : "", (long long)rg[i].start,
                     (long long)rg[i].end);
    ok(rc == want && (want != FD_RANGE_OK || strcmp(got, text) == 0),
       "'%s' of %lld (max %u): rc %d \"%s\" (got rc %d \"%s\")", h,
       (long long)size, max, want, text, rc, got);
}

static void ranges(void)
{
    range("bytes=0-9", 100, FD_RANGE_OK, 0, 9);
    range("bytes=-5", 100, FD_RANGE_OK, 95, 99);
    range("bytes=95-", 100, FD_RANGE_OK, 95, 99);
    range("bytes=95-1000", 100, FD_RANGE_OK, 95, 99);
    range("bytes=-1000", 100, FD_RANGE_OK, 0, 99);
    range("Bytes = 1 - 2", 100, FD_RANGE_OK, 1, 2);
    range("bytes=0-0", 1, FD_RANGE_OK, 0, 0);
    range("bytes=99999999999999999999999-", 100, FD_RANGE_UNSATISFIABLE, 0, 0);
    range("bytes=0-99999999999999999999999", 100, FD_RANGE_OK, 0, 99);
    range("bytes=100-", 100, FD_RANGE_UNSATISFIABLE, 0, 0);
    range("bytes=-0", 100, FD_RANGE_UNSATISFIABLE, 0, 0);
    range("bytes=-1", 0, FD_RANGE_UNSATISFIABLE, 0, 0);
    range("bytes=0-", 0, FD_RANGE_UNSATISFIABLE, 0, 0);
    range("bytes=5-2", 100, FD_RANGE_NONE, 0, 0);
    range("bytes=abc", 100, FD_RANGE_NONE, 0, 0);
    range("bytes=", 100, FD_RANGE_NONE, 0, 0);
    range("bytes=-", 100, FD_RANGE_NONE, 0, 0);
    range("bytes=1-2x", 100, FD_RANGE_NONE, 0, 0);
    range("items=0-1", 100, FD_RANGE_NONE, 0, 0);

    list("bytes=0-1,3-4", 100, 16, FD_RANGE_OK, "0-1 3-4");
    list("bytes=0-4, 10-14 ,-5", 100, 16, FD_RANGE_OK, "0-4 10-14 95-99");
    list("bytes=0-1,,3-4,", 100, 16, FD_RANGE_OK, "0-1 3-4");
    list("bytes=0-1,200-300", 100, 16, FD_RANGE_OK, "0-1");
    list("bytes=200-,300-", 100, 16, FD_RANGE_UNSATISFIABLE, "");
    list("bytes=0-1,5-2", 100, 16, FD_RANGE_NONE, "");
    list("bytes=0-1,x", 100, 16, FD_RANGE_NONE, "");
    list("bytes=0-1;3-4", 100, 16, FD_RANGE_NONE, "");
    list("bytes=,", 100, 16, FD_RANGE_NONE, "");
    list("bytes=0-0,1-1,2-2", 100, 2, FD_RANGE_NONE, "");
    list("bytes=0-0,1-1", 100, 2, FD_RANGE_OK, "0-0 1-1");
    list("bytes=0-99,0-99", 100, 16, FD_RANGE_NONE, ""); /* more than the file */
    list("bytes=0-60,40-99", 100, 16, FD_RANGE_NONE, "");
    list("bytes=0-49,50-99", 100, 16, FD_RANGE_OK, "0-49 50-99");
}

static void etags(void)
{
    fd_str_t e = fd_string("\"2ebc4a21-400\"");
#define M(s) fd_http_etag_match(fd_string(s), e)
    ok(M("\"2ebc4a21-400\""), "exact tag");
    ok(M("W/\"2ebc4a21-400\""), "weak tag matches (weak comparison)");
    ok(M("\"a\", \"2ebc4a21-400\""), "second in a list");
    ok(M("\"a\",W/\"2ebc4a21-400\""), "weak second, no space");
    ok(M("*"), "*");
    ok(!M("\"2ebc4a21-401\""), "other tag");
    ok(!M("2ebc4a21-400"), "unquoted");
    ok(!M("\"2ebc4a21-400"), "unterminated");
    ok(!M(""), "empty");
#undef M
    ok(!fd_http_etag_match(fd_string("\"x\""), fd_null_string),
       "no etag of ours: no match");
    ok(fd_http_if_range(e, e, 0), "If-Range: same strong tag");
    ok(!fd_http_if_range(fd_string("W/\"2ebc4a21-400\""), e, 0),
       "If-Range: weak tag never matches");
    ok(fd_http_if_range(fd_string("Sun, 06 Nov 1994 08:49:37 GMT"), e,
                      784111777), "If-Range: same date");
    ok(!fd_http_if_range(fd_string("Sun, 06 Nov 1994 08:49:38 GMT"), e,
                       784111777), "If-Range: other date");
}

/* FD_OK and *t (the last one's freed), or FD_ERROR (the error, with
 * test.types:LINE, is fastd's to report: tests/static.t reads it) */
static int parse_text(const char *text, mime_table_t **t)
{
    size_t n = strlen(text);
    char *copy = malloc(n + 1);
    mime_table_t *nt;

    memcpy(copy, text, n + 1);
    if ((nt = mime_parse("test.types", copy, n)) == NULL)
        return FD_ERROR;
    mime_table_free(*t);
    *t = nt;
    return FD_OK;
}

static void mime(void)
{
    mime_table_t *t = NULL;
    fd_str_t v;
    char ext[16];

    is_int(parse_text("# c\ntypes {\n text/html html HTM; # x\n"
                           "  image/png png;\n}\ntypes { a/b png; }\n", &t),
           FD_OK, "parse two blocks");
    v = mime_lookup(t, "htm", 3);
    ok(fd_str_eq_lit(v, "text/html"), "htm (stored upper case)");
    v = mime_lookup(t, "HtMl", 4);
    ok(fd_str_eq_lit(v, "text/html"), "HtMl looked up case-insensitively");
    v = mime_lookup(t, "png", 3);
    ok(fd_str_eq_lit(v, "a/b"), "a later block overrides");
    v = mime_lookup(t, "xyz", 3);
    ok(fd_str_eq_lit(v, "application/octet-stream"), "unknown: default");
    v = mime_lookup(t, NULL, 0);
    ok(fd_str_eq_lit(v, "application/octet-stream"), "none: default");

    /* growth past the initial 64 slots */
    {
        char big[200 * 16 + 32], *p = big;

        p += sprintf(p, "types {\n");
        for (int i = 0; i < 200; i++)
            p += sprintf(p, "t/%d e%d;\n", i, i);
        sprintf(p, "}\n");
        is_int(parse_text(big, &t), FD_OK, "200 types parse");
        is_int((int)t->n, 200, "200 entries");
        snprintf(ext, sizeof(ext), "e%d", 137);
        v = mime_lookup(t, ext, strlen(ext));
        ok(fd_str_eq_lit(v, "t/137"), "e137 found after growth");
    }

    is_int(parse_text("types {\n text/html html\n}\n", &t), FD_ERROR,
           "missing ';' is an error");
    is_int(parse_text("typos { }", &t), FD_ERROR, "unknown word");
    is_int(parse_text("types { a/b c;", &t), FD_ERROR, "unclosed block");
    is_int(parse_text("types a/b c; }", &t), FD_ERROR, "missing '{'");
    is_int(parse_text("", &t), FD_OK, "an empty file is fine");

    mime_table_free(t);
}

static int mkfile(const char *path, const char *data)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

    if (fd == -1)
        return -1;
    if (write(fd, data, strlen(data)) < 0) {
        close(fd);
        return -1;
    }
    return close(fd);
}

static void opens(const char *root, int rootfd, const char *how)
{
    const int fl = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
    int fd;

    (void)root;
    fd = fd_file_open_beneath(rootfd, "a.txt", fl);
    ok(fd >= 0, "%s: plain file opens", how);
    if (fd >= 0)
        close(fd);
    fd = fd_file_open_beneath(rootfd, "d/b.txt", fl);
    ok(fd >= 0, "%s: file in a subdirectory opens", how);
    if (fd >= 0)
        close(fd);
    fd = fd_file_open_beneath(rootfd, "", O_PATH | O_DIRECTORY | O_CLOEXEC);
    ok(fd >= 0, "%s: the root itself opens", how);
    if (fd >= 0)
        close(fd);
    fd = fd_file_open_beneath(rootfd, "d/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    ok(fd >= 0, "%s: 'd/' opens as a directory", how);
    if (fd >= 0)
        close(fd);

    errno = 0;
    ok(fd_file_open_beneath(rootfd, "out", fl) == -1 &&
       (errno == ELOOP || errno == EXDEV), "%s: link out of root refused",
       how);
    errno = 0;
    ok(fd_file_open_beneath(rootfd, "in", fl) == -1 && errno == ELOOP,
       "%s: link inside root refused", how);
    errno = 0;
    ok(fd_file_open_beneath(rootfd, "ld/b.txt", fl) == -1 && errno == ELOOP,
       "%s: linked directory refused", how);
    errno = 0;
    ok(fd_file_open_beneath(rootfd, "nope", fl) == -1 && errno == ENOENT,
       "%s: missing: ENOENT", how);
    errno = 0;
    ok(fd_file_open_beneath(rootfd, "a.txt/x", fl) == -1 && errno == ENOTDIR,
       "%s: file as a directory: ENOTDIR", how);
    errno = 0;
    ok(fd_file_open_beneath(rootfd, "a.txt/", fl) == -1 && errno == ENOTDIR,
       "%s: file with a trailing slash: ENOTDIR", how);
}

static void beneath(void)
{
    char tmpl[] = "/tmp/fd-static-XXXXXX", path[256], secret[64], link[64];
    char *root = mkdtemp(tmpl);
    int rootfd;

    if (root == NULL) {
        ok(0, "mkdtemp");
        return;
    }
#define P(s) (snprintf(path, sizeof(path), "%s/%s", root, s), path)
    mkdir(P("d"), 0755);
    mkfile(P("a.txt"), "a");
    mkfile(P("d/b.txt"), "b");
    /* a file beside the root, and a link to it from inside */
    snprintf(secret, sizeof(secret), "%s-secret", root);
    snprintf(link, sizeof(link), "..%s-secret", root + 4);
    mkfile(secret, "secret");
    symlink(link, P("out"));
    symlink("a.txt", P("in"));
    symlink("d", P("ld"));

    rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    ok(rootfd >= 0, "root opens");
    opens(root, rootfd, "openat2");
    fd_file_no_openat2 = 1;
    opens(root, rootfd, "walk");
    fd_file_no_openat2 = 0;
    close(rootfd);

    unlink(P("out"));
    unlink(P("in"));
    unlink(P("ld"));
    unlink(P("d/b.txt"));
    unlink(P("a.txt"));
    rmdir(P("d"));
    unlink(secret);
    rmdir(root);
#undef P
}

int main(void)
{
    dates();
    ranges();
    etags();
    mime();
    beneath();
    return done_testing();
}
