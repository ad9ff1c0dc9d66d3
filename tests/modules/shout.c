/*
 * shout: API 1.4 from outside the tree (tests/modules_api14.t), built
 * against an installed fastd as a user builds a module.
 *
 *   [shout NAME]            a section of its own: suffix = TEXT,
 *                           level = 1..5 (bounds checked as fastd's)
 *   shout = NAME            a location key: the response filter of that
 *                           location upper-cases text/plain bodies through
 *                           a body filter, adds the section's suffix and
 *                           says X-Shout: NAME
 *   [shout fail]            configured() refuses the configuration
 *                           when such a section is there (a check that
 *                           needs all of it)
 */
#include <ctype.h>
#include <stddef.h>
#include <string.h>

#include <fastd.h>

typedef struct {
    const char *suffix;
    int64_t level;
    const char *name;
} shout_section_t;

typedef struct {
    const char *name;
    shout_section_t *s;
} shout_conf_t;

static const fd_api_key_t section_keys[] = {
    {.name = "suffix", .type = FD_API_STRING,
     .offset = offsetof(shout_section_t, suffix), .def = "!",
     .doc = "[shout NAME]: what ends the body"},
    {.name = "level", .type = FD_API_INT,
     .offset = offsetof(shout_section_t, level), .def = "1",
     .doc = "[shout NAME]: 1 .. 5"},
    {.name = NULL}};

static int section_init(const char *name, void *conf, unsigned index)
{
    shout_section_t *s = conf;

    (void)index;
    s->name = name;
    return fd_api_conf_bounds(s, "level", s->level, 1, 5, 0);
}

static const fd_api_section_t section = {
    .type = "shout", .keys = section_keys,
    .conf_size = sizeof(shout_section_t), .name_max = 16, .max = 4,
    .init = section_init};

static const fd_api_key_t keys[] = {
    {.name = "shout", .type = FD_API_STRING,
     .offset = offsetof(shout_conf_t, name),
     .doc = "upper-case this location's text/plain bodies ([shout NAME])"},
    {.name = NULL}};

static int init_conf(void *conf)
{
    shout_conf_t *c = conf;

    if (c->name == NULL)
        return FD_OK;
    if ((c->s = fd_api_section("shout", c->name)) == NULL) {
        fd_api_conf_at_key(c, "shout");
        fd_api_conf_error("no [shout %s]", c->name);
        return FD_ERROR;
    }
    return FD_OK;
}

static int failed;

static void look(const char *name, void *conf, void *data)
{
    (void)conf;
    (void)data;
    if (strcmp(name, "fail") == 0)
        failed = 1;
}

static int configured(void)
{
    failed = 0;
    fd_api_section_each("shout", look, NULL);
    if (failed) {
        fd_api_conf_error("shout: a [shout fail] section, refused once "
                          "the whole configuration is read");
        return FD_ERROR;
    }
    return FD_OK;
}

static int body(fd_request_t *r, const fd_api_piece_t *in, unsigned n,
                int last)
{
    const shout_conf_t *c = fd_req_conf_of(r, FD_API_SELF);
    char buf[256];
    unsigned i;
    size_t k, j;

    for (i = 0; i < n; i++) {
        if (in[i].fd >= 0)
            return FD_ERROR; /* memory bodies only, in this test */
        for (k = 0; k < in[i].len; k += j) {
            for (j = 0; j < sizeof(buf) && k + j < in[i].len; j++)
                buf[j] = (char)toupper((unsigned char)in[i].data[k + j]);
            if (fd_resp_filter_output(r, buf, j) != FD_OK)
                return FD_ERROR;
        }
    }
    if (last)
        return fd_resp_filter_output(r, c->s->suffix, strlen(c->s->suffix));
    return FD_OK;
}

static int filter(fd_request_t *r)
{
    const shout_conf_t *c = fd_req_conf_of(r, FD_API_SELF);
    fd_str_t ct = fd_resp_get_content_type(r);

    if (c == NULL || c->s == NULL || fd_resp_get_status(r) != 200 ||
        ct.len < 10 || strncmp(ct.data, "text/plain", 10) != 0)
        return FD_OK;
    if (fd_resp_header(r, "X-Shout", (fd_str_t){strlen(c->s->name),
                                                c->s->name}) != FD_OK)
        return FD_ERROR;
    if (fd_resp_is_header_only(r)) {
        fd_resp_length_unknown(r);
        return FD_OK;
    }
    return fd_resp_body_filter(r, body) == FD_ERROR ? FD_ERROR : FD_OK;
}

static int active(const void *conf)
{
    return ((const shout_conf_t *)conf)->name != NULL;
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "shout",
    .keys = keys,
    .conf_size = sizeof(shout_conf_t),
    .init_conf = init_conf,
    .active = active,
    .section = &section,
    .configured = configured,
    .filter = filter,
};
