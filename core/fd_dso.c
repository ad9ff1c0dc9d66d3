/*
 * Modules loaded at run time: [main] load_module = PATH.so.
 *
 * The master loads each file when it reads the configuration, before any
 * section is applied, so that the module's keys and its handler name are
 * known to the rest of the file; the workers it forks have them. A module
 * is a shared object built against the public API (core/api/fastd.h)
 * whose one symbol fastd_module describes it. It is checked before it is
 * used: the API's major version must be this fastd's, its minor at most
 * this fastd's (a minor version only adds), and its ABI tag and
 * descriptor size this build's; anything else is refused at -t, at start
 * and at reload with the file:line of the load_module line, both versions
 * and what to do.
 *
 * A loaded module stays for the life of the master: a reload may load
 * more (they are appended to fd_modules), but never unloads or replaces
 * one. A module's file that changed on disk since it was loaded makes the
 * reload fail (the old configuration keeps serving): dlopen() would give
 * back the old code under the new name, a half-reload. Restart to load it.
 *
 * Each loaded module becomes an fd_module_t whose hooks are trampolines
 * (one set per slot, FD_DSO_MAX of them) calling the API's hooks, whose
 * signatures name no engine type.
 *
 * The tree's own modules written on the public API are the same thing
 * linked in: objs/fd_modules.c lists their descriptors
 * (fd_builtin_api_modules) and fd_modules_init() registers them at start,
 * through the same checks and slots, before any configuration is read.
 * ./configure --with-NAME=dynamic builds such a module as a shared object
 * instead, loaded with load_module: the same file, either way.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_http.h"
#include "fd_http_parse.h"
#include "fd_module.h"
#include "fd_ssl.h"
#include "fd_status.h"
#include "fd_var.h"

typedef struct {
    char *path;                /* NULL: built into the binary */
    dev_t dev;
    ino_t ino;
    struct timespec mtime;
    void *handle;
    /* the module's descriptor, copied: an older minor's shorter one is
     * zero-extended, so the fields it lacks read as "none" */
    fd_api_module_t api;
    fd_api_module_t *self;     /* the module's own descriptor (id) */
    fd_module_t m;
    fd_directive_t *keys;
    fd_var_t *vars;            /* 1.2: its $variables, as the engine's */
    fd_directive_t *section_keys; /* 1.4: its [TYPE NAME] keys */
} dso_t;

static dso_t dsos[FD_DSO_MAX];
static unsigned ndsos;
static fd_conf_t *conf_cf; /* the load that runs an init_conf now */
static const fd_http_loc_t *conf_loc; /* ... for this location */

fd_conf_t *fd_dso_conf(void)
{
    return conf_cf;
}

void fd_dso_conf_enter(fd_conf_t *cf)
{
    conf_cf = cf;
}

const fd_http_loc_t *fd_dso_conf_loc(void)
{
    return conf_loc;
}

void fd_api_conf_error(const char *fmt, ...)
{
    char buf[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (conf_cf)
        fd_conf_error(conf_cf, "%s", buf);
}

/* 1.2: a module with an access or a log hook: its keys are every
 * location's, not its handlers' */
static int phase_module(const fd_api_module_t *a)
{
    return a->access != NULL || a->log != NULL ||
           (a->api_minor >= 4 && a->filter != NULL);
}

static int init_conf(unsigned i, fd_conf_t *cf, const fd_http_loc_t *loc,
                     void *conf)
{
    int rc;

    /* a handler module's keys are its handlers' (handler keys): its
     * configuration means something where one of them answers only; a
     * phase module's, in every location */
    if (dsos[i].api.init_conf == NULL ||
        (loc->handler != &dsos[i].m && !phase_module(&dsos[i].api)))
        return FD_OK;
    conf_cf = cf;
    conf_loc = loc;
    cf->err[0] = '\0';
    rc = dsos[i].api.init_conf(conf);
    conf_cf = NULL;
    conf_loc = NULL;
    if (rc != FD_OK && cf->err[0] == '\0')
        fd_conf_error(cf, "module %s refused its configuration",
                      dsos[i].m.name);
    return rc == FD_OK ? FD_OK : FD_ERROR;
}

/* 1.4: a [TYPE NAME] of the module's, its keys set */
static int init_section(unsigned i, fd_conf_t *cf, const char *name,
                        void *conf)
{
    const fd_api_section_t *sec = dsos[i].api.section;
    const fd_conf_section_t *s;
    unsigned index = 0;
    int rc;

    if (sec->name_max && !dsos[i].m.section_unnamed &&
        fd_cycle_section_name(cf, sec->type, name, sec->name_max) != FD_OK)
        return FD_ERROR;
    for (s = cf->cycle->sections; s; s = s->next)
        index += s->module == &dsos[i].m;
    if (sec->max && index >= sec->max)
        return fd_conf_error(cf, "more than %u [%s] sections", sec->max,
                             sec->type);
    if (sec->init == NULL)
        return FD_OK;
    conf_cf = cf;
    cf->err[0] = '\0';
    rc = sec->init(name, conf, index);
    conf_cf = NULL;
    if (rc != FD_OK && cf->err[0] == '\0')
        fd_conf_error(cf, "module %s refused [%s %s]", dsos[i].m.name,
                      sec->type, name);
    return rc == FD_OK ? FD_OK : FD_ERROR;
}

int fd_dso_module(const fd_module_t *m)
{
    unsigned i;

    for (i = 0; i < ndsos; i++)
        if (&dsos[i].m == m)
            return 1;
    return 0;
}

/* path (len bytes) added to the NULL-ended *list, unless it is there */
static int path_add(fd_conf_t *cf, const char ***list, const char *path,
                    size_t len)
{
    const char **paths, **p;
    size_t n = 0;

    for (p = *list; p && *p; p++, n++)
        if (strlen(*p) == len && memcmp(*p, path, len) == 0)
            return FD_OK;
    /* a few paths: the list is copied whole to grow it (the old copy is
     * the configuration's memory, freed with it) */
    paths = fd_palloc(cf->pool, (n + 2) * sizeof(*paths));
    if (paths == NULL || (paths[n] = fd_pstrdup(cf->pool, path, len)) == NULL)
        return FD_ERROR;
    if (n)
        memcpy(paths, *list, n * sizeof(*paths));
    paths[n + 1] = NULL;
    *list = paths;
    return FD_OK;
}

int fd_dso_worker_file(fd_conf_t *cf, const char *path)
{
    return path_add(cf, &cf->cycle->worker_files, path, strlen(path));
}

int fd_dso_worker_dir(fd_conf_t *cf, const char *path)
{
    size_t n = strlen(path), i;
    long made;
    char *p;

    while (n > 1 && path[n - 1] == '/')
        n--;
    if (path[0] != '/')
        return fd_conf_error(cf, "\"%s\": not an absolute directory", path);
    if ((p = fd_pstrdup(cf->pool, path, n)) == NULL)
        return fd_conf_error(cf, "out of memory");
    if (fd_mkdirs(p, 0, 0700, &made) != FD_OK)
        return fd_conf_error(cf, "mkdir(\"%s\") failed: %s", p,
                             strerror(errno));
    /* each directory made, a parent as much as path itself: the workers
     * must get through and into it (one that was there is left alone) */
    for (i = made < 0 ? n + 1 : (size_t)made; i <= n; i++)
        if ((p[i] == '/' || i == n) &&
            path_add(cf, &cf->cycle->worker_dirs, p, i) != FD_OK)
            return fd_conf_error(cf, "out of memory");
    return FD_OK;
}

int fd_dso_give_dirs(fd_conf_t *cf, fd_cycle_t *cy)
{
    const char **p;
    int fd, rc;

    if (!cy->main.drop || cy->worker_dirs == NULL)
        return FD_OK;
    for (p = cy->worker_dirs; *p; p++) {
        /* made by this master a moment ago: never through a link another
         * put in its place */
        fd = open(*p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        rc = fd < 0 ? -1 : fchown(fd, cy->main.uid, cy->main.gid);
        if (fd >= 0)
            close(fd);
        if (rc == -1)
            return fd_conf_error(cf, "chown(\"%s\") to user \"%s\" "
                                 "failed: %s", *p, cy->main.user,
                                 strerror(errno));
    }
    return FD_OK;
}

void fd_dso_give_files(fd_cycle_t *cy)
{
    const char **p;
    struct stat st;
    int fd;

    if (fd_conf_test || !cy->main.drop || cy->worker_files == NULL)
        return;
    for (p = cy->worker_files; *p; p++) {
        /* O_NOFOLLOW, a regular file: never /dev/stdout's terminal or
         * pipe */
        fd = open(*p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW,
                  0644);
        if (fd < 0)
            continue; /* the worker's own open() reports it */
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            st.st_uid != cy->main.uid &&
            fchown(fd, cy->main.uid, cy->main.gid) < 0)
            fd_log_error(FD_LOG_WARN, errno, "\"%s\": fchown() to user "
                         "\"%s\" failed", *p, cy->main.user);
        close(fd);
    }
}

/* 1.4: the whole configuration read, in the master */
static int configured(unsigned i, fd_conf_t *cf)
{
    int rc;

    conf_cf = cf;
    cf->err[0] = '\0';
    rc = dsos[i].api.configured();
    conf_cf = NULL;
    if (rc != FD_OK && cf->err[0] == '\0')
        fd_conf_error(cf, "module %s refused the configuration",
                      dsos[i].m.name);
    return rc == FD_OK ? FD_OK : FD_ERROR;
}

static int init_worker(unsigned i)
{
    if (dsos[i].api.init_worker == NULL)
        return FD_OK;
    if (dsos[i].api.init_worker() != FD_OK) {
        fd_log_error(FD_LOG_EMERG, 0, "module %s: init_worker failed",
                     dsos[i].m.name);
        return FD_ERROR;
    }
    return FD_OK;
}

static void exit_worker(unsigned i)
{
    if (dsos[i].api.exit_worker)
        dsos[i].api.exit_worker();
}

/* 1.8: fastd -s CMD ARG, in the configuration that was read */
static int command(unsigned i, fd_cycle_t *cy, const char *cmd,
                   const char *arg)
{
    int rc;

    fd_dso_cycle = cy;
    rc = dsos[i].api.command(cmd, arg);
    fd_dso_cycle = NULL;
    return rc;
}

/* slot i's hooks, as fd_module_t has them */
#define DSO_SLOT(i)                                                          \
    static int init_conf_##i(fd_conf_t *cf, fd_http_loc_t *loc, void *c)    \
    {                                                                        \
        return init_conf(i, cf, loc, c);                                     \
    }                                                                        \
    static int init_worker_##i(fd_worker_t *w)                               \
    {                                                                        \
        (void)w;                                                             \
        return init_worker(i);                                               \
    }                                                                        \
    static void exit_worker_##i(fd_worker_t *w)                              \
    {                                                                        \
        (void)w;                                                             \
        exit_worker(i);                                                      \
    }                                                                        \
    static int loc_active_##i(const fd_http_loc_t *loc)                      \
    {                                                                        \
        return dsos[i].api.active(fd_loc_conf(loc, &dsos[i].m));             \
    }                                                                        \
    static void status_##i(fd_status_t *st, const void *area, unsigned w)    \
    {                                                                        \
        dsos[i].api.status((fd_api_status_t *)st, area, w);                  \
    }                                                                        \
    static void reopen_##i(fd_worker_t *w)                                   \
    {                                                                        \
        (void)w;                                                             \
        dsos[i].api.reopen();                                                \
    }                                                                        \
    static int init_section_##i(fd_conf_t *cf, const char *name, void *c)  \
    {                                                                        \
        return init_section(i, cf, name, c);                                 \
    }                                                                        \
    static int init_cycle_##i(fd_conf_t *cf, fd_cycle_t *cy)                 \
    {                                                                        \
        (void)cy;                                                            \
        return configured(i, cf);                                            \
    }                                                                        \
    static void status_shared_##i(fd_status_t *st)                           \
    {                                                                        \
        dsos[i].api.status_shared((fd_api_status_t *)st);                    \
    }                                                                        \
    static int command_##i(fd_cycle_t *cy, const char *cmd, const char *arg) \
    {                                                                        \
        return command(i, cy, cmd, arg);                                     \
    }
DSO_SLOT(0) DSO_SLOT(1) DSO_SLOT(2) DSO_SLOT(3) DSO_SLOT(4) DSO_SLOT(5)
DSO_SLOT(6) DSO_SLOT(7) DSO_SLOT(8) DSO_SLOT(9) DSO_SLOT(10) DSO_SLOT(11)
DSO_SLOT(12) DSO_SLOT(13) DSO_SLOT(14) DSO_SLOT(15) DSO_SLOT(16)
DSO_SLOT(17) DSO_SLOT(18) DSO_SLOT(19) DSO_SLOT(20) DSO_SLOT(21)
DSO_SLOT(22) DSO_SLOT(23) DSO_SLOT(24) DSO_SLOT(25) DSO_SLOT(26)
DSO_SLOT(27) DSO_SLOT(28) DSO_SLOT(29) DSO_SLOT(30) DSO_SLOT(31)
DSO_SLOT(32) DSO_SLOT(33) DSO_SLOT(34) DSO_SLOT(35) DSO_SLOT(36)
DSO_SLOT(37) DSO_SLOT(38) DSO_SLOT(39) DSO_SLOT(40) DSO_SLOT(41)
DSO_SLOT(42) DSO_SLOT(43) DSO_SLOT(44) DSO_SLOT(45) DSO_SLOT(46)
DSO_SLOT(47)

#define HOOKS(i)                                                             \
    {init_conf_##i, init_worker_##i, exit_worker_##i, loc_active_##i,        \
     status_##i, reopen_##i, init_section_##i, init_cycle_##i,               \
     status_shared_##i, command_##i}
static const struct {
    int (*init_conf)(fd_conf_t *, fd_http_loc_t *, void *);
    int (*init_worker)(fd_worker_t *);
    void (*exit_worker)(fd_worker_t *);
    int (*loc_active)(const fd_http_loc_t *);
    void (*status)(fd_status_t *, const void *, unsigned);
    void (*reopen)(fd_worker_t *);
    int (*init_section)(fd_conf_t *, const char *, void *);
    int (*init_cycle)(fd_conf_t *, fd_cycle_t *);
    void (*status_shared)(fd_status_t *);
    int (*command)(fd_cycle_t *, const char *, const char *);
} hooks[FD_DSO_MAX] = {
    HOOKS(0),  HOOKS(1),  HOOKS(2),  HOOKS(3),  HOOKS(4),  HOOKS(5),
    HOOKS(6),  HOOKS(7),  HOOKS(8),  HOOKS(9),  HOOKS(10), HOOKS(11),
    HOOKS(12), HOOKS(13), HOOKS(14), HOOKS(15), HOOKS(16), HOOKS(17),
    HOOKS(18), HOOKS(19), HOOKS(20), HOOKS(21), HOOKS(22), HOOKS(23),
    HOOKS(24), HOOKS(25), HOOKS(26), HOOKS(27), HOOKS(28), HOOKS(29),
    HOOKS(30), HOOKS(31), HOOKS(32), HOOKS(33), HOOKS(34), HOOKS(35),
    HOOKS(36), HOOKS(37), HOOKS(38), HOOKS(39), HOOKS(40), HOOKS(41),
    HOOKS(42), HOOKS(43), HOOKS(44), HOOKS(45), HOOKS(46), HOOKS(47),
};
_Static_assert(sizeof(hooks) / sizeof(hooks[0]) == FD_DSO_MAX,
               "a slot's hooks for each of FD_DSO_MAX");

unsigned fd_api_version(void)
{
    return FD_API_VERSION_MAJOR * 1000 + FD_API_VERSION_MINOR;
}

/* the API's methods as the engine's FD_METHOD() bits */
static unsigned methods(unsigned api)
{
    static const struct {
        unsigned api;
        int id;
    } map[] = {{FD_API_GET, FD_HTTP_GET},       {FD_API_HEAD, FD_HTTP_HEAD},
               {FD_API_POST, FD_HTTP_POST},     {FD_API_PUT, FD_HTTP_PUT},
               {FD_API_DELETE, FD_HTTP_DELETE}, {FD_API_OPTIONS,
                                                 FD_HTTP_OPTIONS},
               {FD_API_PATCH, FD_HTTP_PATCH},   {FD_API_OTHER,
                                                 FD_HTTP_UNKNOWN}};
    unsigned m = 0, i;

    for (i = 0; i < fd_nelems(map); i++)
        if (api & map[i].api)
            m |= FD_METHOD(map[i].id);
    return m;
}

/* An FD_API_CUSTOM or FD_API_LIST(_REPLACE) key's line, to its module's
 * set() */
static int dso_set(fd_conf_t *cf, const fd_directive_t *k, void *conf,
                   const char *value)
{
    unsigned i;
    int rc;

    int section = 0;

    for (i = 0; i < ndsos; i++) {
        if (dsos[i].keys && k >= dsos[i].keys &&
            fd_conf_find(dsos[i].keys, k->name) == k)
            break;
        /* 1.4: a key of the module's [TYPE NAME] */
        if (dsos[i].section_keys && k >= dsos[i].section_keys &&
            fd_conf_find(dsos[i].section_keys, k->name) == k) {
            section = 1;
            break;
        }
    }
    if (i == ndsos)
        return fd_conf_error(cf, "\"%s\": no module parses it", k->name);
    conf_cf = cf;
    cf->err[0] = '\0';
    rc = section ? dsos[i].api.section->set(conf, k->name, value, 1)
                 : dsos[i].api.set(conf, k->name, value, cf->own_line);
    conf_cf = NULL;
    if (rc != FD_OK && cf->err[0] == '\0')
        fd_conf_error(cf, "\"%s\": module %s refused \"%s\"", k->name,
                      dsos[i].m.name, value);
    return rc == FD_OK ? FD_OK : FD_ERROR;
}

/* The module's keys k (conf_size bytes of conf; of its section: not
 * parsed by set) as the loader's directives *out: the API's types are the
 * loader's, laid out alike (fastd.h says which C type each is). */
static int keys(fd_conf_t *cf, dso_t *d, const fd_api_key_t *k,
                size_t conf_size, int section, fd_directive_t **out,
                const char *file)
{
    static const struct {
        int api;
        fd_conf_type_t type;
        size_t size;
    } types[] = {{FD_API_STRING, FD_CONF_STR, sizeof(char *)},
                 {FD_API_INT, FD_CONF_INT, sizeof(fd_int_t)},
                 {FD_API_FLAG, FD_CONF_FLAG, sizeof(int)},
                 {FD_API_MSEC, FD_CONF_MSEC, sizeof(fd_msec_t)},
                 {FD_API_SIZE, FD_CONF_SIZE, sizeof(size_t)}};
    size_t n = 0, i, t;

    while (k && k[n].name)
        n++;
    *out = calloc(n + 1, sizeof(fd_directive_t));
    if (*out == NULL)
        return fd_conf_error(cf, "out of memory");
    for (i = 0; i < n; i++) {
        /* 1.9: an old name, refused with the new one */
        if (d->api.api_minor >= 9 && k[i].type == FD_API_RENAMED) {
            if (k[i].def == NULL)
                return fd_conf_error(cf, "load_module \"%s\": key \"%s\" "
                                     "is FD_API_RENAMED without a def (what "
                                     "replaces it)", file, k[i].name);
            (*out)[i] = (fd_directive_t){
                .name = k[i].name, .renamed = k[i].def,
                .handler_key = !section && !phase_module(&d->api),
                .doc = k[i].doc};
            continue;
        }
        if ((d->api.api_minor >= 2 &&
             (k[i].type == FD_API_CUSTOM || k[i].type == FD_API_LIST)) ||
            (d->api.api_minor >= 5 && k[i].type == FD_API_LIST_REPLACE)) {
            if (section ? d->api.section->set == NULL : d->api.set == NULL)
                return fd_conf_error(cf, "load_module \"%s\": key \"%s\" "
                                     "is parsed by the module, which has no "
                                     "set()", file, k[i].name);
            (*out)[i] = (fd_directive_t){
                .name = k[i].name,
                .type = k[i].type == FD_API_CUSTOM ? FD_CONF_CUSTOM
                                                   : FD_CONF_LIST,
                .replace = k[i].type == FD_API_LIST_REPLACE,
                /* 1.10: a CUSTOM key's default, given to set() first */
                .def = d->api.api_minor >= 10 &&
                               k[i].type == FD_API_CUSTOM
                           ? k[i].def
                           : NULL,
                .set = dso_set,
                .handler_key = !section && !phase_module(&d->api),
                .doc = k[i].doc ? k[i].doc : ""};
            continue;
        }
        for (t = 0; t < fd_nelems(types); t++)
            if (types[t].api == k[i].type)
                break;
        if (t == fd_nelems(types) ||
            k[i].offset + types[t].size > conf_size)
            return fd_conf_error(cf, "load_module \"%s\": key \"%s\" has "
                                 "an unknown type or lies outside the "
                                 "module's conf_size%s", file, k[i].name,
                                 section ? " (of its section)" : "");
        (*out)[i] = (fd_directive_t){
            .name = k[i].name, .type = types[t].type,
            .offset = k[i].offset, .def = k[i].def,
            .handler_key = !section && !phase_module(&d->api),
            .doc = k[i].doc ? k[i].doc : ""};
    }
    return FD_OK;
}

/* The descriptor's size a module built for minor version minor has */
static size_t descriptor_size(uint32_t minor)
{
    return minor == 0   ? offsetof(fd_api_module_t, handlers)
           : minor == 1 ? offsetof(fd_api_module_t, set)
           : minor == 2 ? offsetof(fd_api_module_t, reopen)
           : minor == 3 ? offsetof(fd_api_module_t, section)
           : minor <= 7 ? offsetof(fd_api_module_t, early)
                        : sizeof(fd_api_module_t);
}

/* A 1.2 module's getter of one of its variables, in the engine's
 * fd_var_t.data */
static fd_str_t api_var_get(fd_request_t *r, const fd_var_op_t *op,
                            char *tmp)
{
    fd_str_t (*get)(fd_request_t *, char *);

    memcpy(&get, &op->var->data, sizeof(get));
    return get(r, tmp);
}

/* The module's $variables as the engine's (fd_var.h) */
static int vars(fd_conf_t *cf, dso_t *d, const char *file)
{
    const fd_api_var_t *v = d->api.vars;
    size_t n = 0, i;

    _Static_assert(sizeof(uintptr_t) >= sizeof(v->get),
                   "a getter fits fd_var_t.data");
    _Static_assert(FD_API_VAR_TMP <= FD_VAR_TMP &&
                       FD_API_VAR_NUMBER == FD_VAR_NUMBER,
                   "the API's variables are the engine's");
    while (v && v[n].name)
        n++;
    if (n == 0)
        return FD_OK;
    d->vars = calloc(n + 1, sizeof(fd_var_t));
    if (d->vars == NULL)
        return fd_conf_error(cf, "out of memory");
    for (i = 0; i < n; i++) {
        if (v[i].get == NULL || fd_var_find(v[i].name, strlen(v[i].name)))
            return fd_conf_error(cf, "load_module \"%s\": variable $%s "
                                 "has no getter, or fastd has one of that "
                                 "name", file, v[i].name);
        d->vars[i] = (fd_var_t){.name = v[i].name, .get = api_var_get,
                                .flags = v[i].flags & FD_VAR_NUMBER};
        memcpy(&d->vars[i].data, &v[i].get, sizeof(v[i].get));
    }
    return FD_OK;
}

/* the API's handler flags as the engine's */
static unsigned module_flags(unsigned api)
{
    return ((api & FD_API_BLOCKING) ? FD_MODULE_BLOCKING : 0) |
           ((api & FD_API_THREAD_SAFE) ? FD_MODULE_THREAD_SAFE : 0) |
           ((api & FD_API_STREAM_BODY) ? FD_MODULE_STREAM_BODY : 0) |
           ((api & FD_API_TUNNEL) ? FD_MODULE_TUNNEL : 0);
}

/* A handler = name in use: a module's, or a handler's of a module here */
static int name_taken(const char *name)
{
    const fd_api_handler_t *h;
    unsigned i;

    if (fd_module_find(name))
        return 1;
    for (i = 0; i < ndsos; i++)
        for (h = dsos[i].api.handlers; h && h->name; h++)
            if (strcmp(h->name, name) == 0)
                return 1;
    return 0;
}

const fd_module_t *fd_dso_handler_find(const char *name, fd_handler_pt *fn,
                                       unsigned *flags, unsigned *methods_)
{
    const fd_api_handler_t *h;
    unsigned i;

    for (i = 0; i < ndsos; i++)
        for (h = dsos[i].api.handlers; h && h->name; h++)
            if (strcmp(h->name, name) == 0) {
                *fn = (fd_handler_pt)h->handler;
                *flags = module_flags(h->flags);
                *methods_ = methods(h->methods);
                return &dsos[i].m;
            }
    return NULL;
}

void fd_dso_handler_names(fd_conf_near_t *nr)
{
    const fd_api_handler_t *h;
    unsigned i;

    for (i = 0; i < ndsos; i++)
        for (h = dsos[i].api.handlers; h && h->name; h++)
            fd_conf_near_add(nr, h->name);
}

/* A body streamed to a handler on the pool cannot be: it would read the
 * connection from another thread. */
static int stream_on_pool(fd_conf_t *cf, unsigned f, const char *name,
                          const char *file)
{
    if ((f & FD_API_STREAM_BODY) &&
        (f & (FD_API_BLOCKING | FD_API_THREAD_SAFE)))
        return fd_conf_error(cf, "load_module \"%s\": handler %s: "
                             "FD_API_STREAM_BODY is for a handler on the "
                             "loop, not with FD_API_BLOCKING or "
                             "FD_API_THREAD_SAFE (one on the pool gets its "
                             "body whole, which fd_req_read() hands out in "
                             "pieces too)", file, name);
    return FD_OK;
}

/* file's module, checked: FD_OK or FD_ERROR after fd_conf_error() */
static int check(fd_conf_t *cf, const fd_api_module_t *a, const char *file)
{
    const fd_api_handler_t *h, *o;
    const char *rebuild = "rebuild it against this fastd's headers "
                          "(cc -shared -fPIC $(pkg-config --cflags fastd))";

    if (a->api_major != FD_API_VERSION_MAJOR ||
        a->api_minor > FD_API_VERSION_MINOR)
        return fd_conf_error(cf, "load_module \"%s\": the module is built "
                             "for fastd API %u.%u, this fastd has API %u.%u "
                             "(it loads %u.0 to %u.%u): %s, or run a fastd "
                             "with API %u.%u", file, a->api_major,
                             a->api_minor, FD_API_VERSION_MAJOR,
                             FD_API_VERSION_MINOR, FD_API_VERSION_MAJOR,
                             FD_API_VERSION_MAJOR, FD_API_VERSION_MINOR,
                             rebuild, a->api_major, a->api_minor);
    if (a->abi == NULL || strcmp(a->abi, FD_API_ABI_TAG) != 0 ||
        a->size != descriptor_size(a->api_minor))
        return fd_conf_error(cf, "load_module \"%s\": the module's ABI "
                             "(%s, a %zu-byte descriptor) is not this "
                             "fastd's (%s, %zu bytes): %s", file,
                             a->abi ? a->abi : "none", a->size,
                             FD_API_ABI_TAG,
                             descriptor_size(a->api_minor), rebuild);
    if (a->name == NULL || *a->name == '\0' ||
        (a->handler == NULL && (a->api_minor < 1 || a->handlers == NULL ||
                                a->handlers[0].name == NULL) &&
         (a->api_minor < 2 ||
          (!phase_module(a) && a->status == NULL && a->vars == NULL &&
           (a->api_minor < 4 || (a->section == NULL && a->filter == NULL)) &&
           (a->api_minor < 8 || (a->early == NULL && a->tls == NULL))))))
        return fd_conf_error(cf, "load_module \"%s\": the module has no "
                             "name, or nothing to do (no handler; from 1.2 "
                             "neither an access or log hook, figures nor "
                             "variables; from 1.4 nor a section)", file);
    if (name_taken(a->name))
        return fd_conf_error(cf, "load_module \"%s\": a module or handler "
                             "named \"%s\" is already there", file, a->name);
    if (stream_on_pool(cf, a->flags, a->name, file) != FD_OK)
        return FD_ERROR;
    for (h = a->api_minor >= 1 ? a->handlers : NULL; h && h->name; h++) {
        if (*h->name == '\0' || h->handler == NULL)
            return fd_conf_error(cf, "load_module \"%s\": a handler of the "
                                 "module has no name or no function", file);
        if (name_taken(h->name) || strcmp(h->name, a->name) == 0)
            return fd_conf_error(cf, "load_module \"%s\": a module or "
                                 "handler named \"%s\" is already there",
                                 file, h->name);
        for (o = a->handlers; o < h; o++)
            if (strcmp(o->name, h->name) == 0)
                return fd_conf_error(cf, "load_module \"%s\": two handlers "
                                     "named \"%s\"", file, h->name);
        if (stream_on_pool(cf, h->flags, h->name, file) != FD_OK)
            return FD_ERROR;
    }
    return FD_OK;
}

/* a, checked, as the next module (FD_OK), or FD_ERROR after
 * fd_conf_error(); file is its file, or NULL when it is built in */
static int add(fd_conf_t *cf, const fd_api_module_t *a, const char *file,
               const struct stat *st, void *h)
{
    const char *what = file ? file : a->name;
    fd_module_t **list;
    dso_t *d;

    if (ndsos == FD_DSO_MAX)
        return fd_conf_error(cf, "load_module \"%s\": more than %d modules "
                             "on the public API", what, FD_DSO_MAX);
    /* a request's fd_req_first() bits: one a module index */
    if (fd_nmodules >= 64)
        return fd_conf_error(cf, "load_module \"%s\": more than 64 modules "
                             "in all", what);
    if (check(cf, a, what) != FD_OK)
        return FD_ERROR;
    if (a->api_minor >= 8 && a->tls &&
        fd_ssl_provider_add(a->tls, 1) != FD_OK)
        return fd_conf_error(cf, "load_module \"%s\": the certificates it "
                             "provides (tls) have no scheme, a scheme "
                             "another module provides, or lack a call",
                             what);
    if (a->api_minor >= 2 && a->shm_size && fd_shm)
        return fd_conf_error(cf, "load_module \"%s\": the module keeps "
                             "figures in the status slots (shm_size), which "
                             "are laid out at start: restart fastd to load "
                             "it", what);
    d = &dsos[ndsos];
    *d = (dso_t){.handle = h, .self = (fd_api_module_t *)a};
    memcpy(&d->api, a, descriptor_size(a->api_minor));
    if (st)
        d->dev = st->st_dev, d->ino = st->st_ino, d->mtime = st->st_mtim;
    list = malloc((fd_nmodules + 2) * sizeof(*list));
    if ((file && (d->path = strdup(file)) == NULL) || list == NULL ||
        keys(cf, d, a->keys, d->api.conf_size, 0, &d->keys, what) != FD_OK ||
        (d->api.section &&
         keys(cf, d, d->api.section->keys, d->api.section->conf_size, 1,
              &d->section_keys, what) != FD_OK) ||
        vars(cf, d, what) != FD_OK) {
        free(list);
        free(d->path);
        free(d->keys);
        free(d->section_keys);
        free(d->vars);
        return cf->err[0] ? FD_ERROR : fd_conf_error(cf, "out of memory");
    }
    d->m = (fd_module_t){
        .name = a->name, .directives = d->keys,
        .conf_size = a->conf_size ? a->conf_size : 1,
        .init_conf = hooks[ndsos].init_conf,
        .init_worker = hooks[ndsos].init_worker,
        .exit_worker = hooks[ndsos].exit_worker,
        .handler = (fd_handler_pt)a->handler,
        .flags = module_flags(a->flags),
        .methods = methods(a->methods),
        /* 1.2 (zero for an older module): the hooks' types are the
         * engine's but for active and status, which go through the slot */
        .access = d->api.access,
        .loc_active = d->api.active ? hooks[ndsos].loc_active : NULL,
        .log = d->api.log,
        .vars = d->vars,
        .shm_size = d->api.shm_size,
        .status = d->api.status ? hooks[ndsos].status : NULL,
        .retire = d->api.retire,
        /* 1.3 */
        .reopen = d->api.reopen ? hooks[ndsos].reopen : NULL,
        /* 1.4 */
        .section = d->api.section ? d->api.section->type : NULL,
        .section_directives = d->section_keys,
        .section_size = d->api.section ? d->api.section->conf_size : 0,
        .init_section = d->api.section ? hooks[ndsos].init_section : NULL,
        /* 1.7: [TYPE] alone, once (the loader refuses a name, a second) */
        .section_unnamed = d->api.section && d->api.api_minor >= 7 &&
                           d->api.section->name_max ==
                               FD_API_SECTION_UNNAMED,
        .init_cycle = d->api.configured ? hooks[ndsos].init_cycle : NULL,
        .filter = d->api.filter,
        /* 1.8: early's type is the engine's */
        .early = d->api.early,
        .status_shared = d->api.status_shared ? hooks[ndsos].status_shared
                                              : NULL,
        .command = d->api.command ? hooks[ndsos].command : NULL,
        .index = fd_nmodules};
    /* every key name once, in every table (fd_cycle_check_keys) */
    memcpy(list, fd_modules, fd_nmodules * sizeof(*list));
    list[fd_nmodules] = &d->m;
    list[fd_nmodules + 1] = NULL;
    if (fd_modules != fd_builtin_modules)
        free(fd_modules);
    fd_modules = list;
    fd_nmodules++;
    ndsos++;
    if (fd_cycle_check_keys(cf->err, sizeof(cf->err)) != FD_OK) {
        /* a key another table has: out again, as if never loaded */
        char why[sizeof(cf->err)];
        snprintf(why, sizeof(why), "%s", cf->err);
        fd_nmodules--;
        ndsos--;
        fd_modules[fd_nmodules] = NULL;
        free(d->keys);
        free(d->section_keys);
        free(d->vars);
        free(d->path);
        return fd_conf_error(cf, "load_module \"%s\": %s", what, why);
    }
    if (a->api_minor >= 2)
        d->self->id = d->m.index; /* FD_API_SELF's calls find it by this */
    if (a->api_minor >= 8 && a->tls)
        fd_ssl_provider_add(a->tls, 0); /* checked above */
    return FD_OK;
}

int fd_dso_load(fd_conf_t *cf, const char *file)
{
    const fd_api_module_t *a;
    struct stat st;
    unsigned i;
    void *h;

    if (stat(file, &st) < 0)
        return fd_conf_error(cf, "load_module \"%s\": %s", file,
                             strerror(errno));
    for (i = 0; i < ndsos; i++) {
        if (dsos[i].path == NULL || strcmp(dsos[i].path, file) != 0)
            continue;
        if (st.st_dev != dsos[i].dev || st.st_ino != dsos[i].ino ||
            st.st_mtim.tv_sec != dsos[i].mtime.tv_sec ||
            st.st_mtim.tv_nsec != dsos[i].mtime.tv_nsec)
            return fd_conf_error(cf, "load_module \"%s\": the file changed "
                                 "since it was loaded; a running fastd "
                                 "keeps a module's first code: restart "
                                 "fastd to load the new one", file);
        return FD_OK; /* loaded by an earlier load or a line above */
    }
    h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return fd_conf_error(cf, "load_module \"%s\": %s", file, dlerror());
    a = dlsym(h, "fastd_module");
    if (a == NULL) {
        dlclose(h);
        return fd_conf_error(cf, "load_module \"%s\": no fastd_module in "
                             "it (a module defines it with FD_API_MODULE)",
                             file);
    }
    if (add(cf, a, file, &st, h) != FD_OK) {
        dlclose(h);
        return FD_ERROR;
    }
    return FD_OK;
}

int fd_modules_init(void)
{
    static int done;
    fd_conf_t cf;
    unsigned i, nengine;

    if (done)
        return FD_OK;
    done = 1;
    for (i = 0; fd_modules[i]; i++)
        fd_modules[i]->index = i;
    memset(&cf, 0, sizeof(cf));
    nengine = fd_nmodules;
    for (i = 0; fd_builtin_api_modules[i]; i++)
        if (add(&cf, fd_builtin_api_modules[i], NULL, NULL, NULL) != FD_OK) {
            fprintf(stderr, "fastd: [emerg] built-in module: %s\n", cf.err);
            return FD_ERROR;
        }
    /* each where auto/modules has it among the engine's: module order is
     * the order of the access and log hooks (acl before auth_basic) */
    for (i = 0; fd_builtin_api_modules[i]; i++) {
        unsigned to = fd_builtin_api_at[i] + i, from = nengine + i;
        fd_module_t *m = fd_modules[from];
        memmove(&fd_modules[to + 1], &fd_modules[to],
                (from - to) * sizeof(*fd_modules));
        fd_modules[to] = m;
    }
    for (i = 0; fd_modules[i]; i++)
        fd_modules[i]->index = i;
    for (i = 0; i < ndsos; i++)
        if (dsos[i].api.api_minor >= 2)
            dsos[i].self->id = dsos[i].m.index;
    return FD_OK;
}
