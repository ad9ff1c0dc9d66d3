#ifndef FD_CONF_H
#define FD_CONF_H

/*
 * Typed configuration directives. A directive names a key, its type and
 * where its value goes (an offset into a conf struct). Every key is declared
 * once with its default and its documentation; README.md and
 * conf/fastd.conf repeat that text.
 *
 * Loading is three steps (fd_conf_load):
 *   1. read: the INI file and its includes become a list of entries
 *      (section, key, value, file, line), through ini_parse_stream with a
 *      reader that counts lines and sees every section header;
 *   2. profile: the selected [profile NAME] overrides entries of the
 *      singleton sections, or appends them;
 *   3. apply: each entry is parsed into its typed slot; any error names
 *      file:line and stops the load.
 */

typedef enum {
    FD_CONF_FLAG,     /* on|off            -> int            */
    FD_CONF_INT,      /* 123               -> fd_int_t       */
    FD_CONF_SIZE,     /* 8k, 1m, 2g        -> size_t         */
    FD_CONF_MSEC,     /* 75s, 500ms, 1m    -> fd_msec_t      */
    FD_CONF_ENUM,     /* one of .enums     -> int            */
    FD_CONF_STR,      /* any text          -> char *         */
    FD_CONF_LIST,     /* repeatable text   -> fd_conf_list_t, or .set() */
    FD_CONF_CUSTOM    /* .set() parses it                    */
} fd_conf_type_t;

typedef struct {
    const char *name;
    int value;
} fd_conf_enum_t;

typedef struct {
    char **items;
    unsigned n;
    unsigned cap;   /* room in items (fd_parray_reserve) */
} fd_conf_list_t;

typedef struct fd_directive_s fd_directive_t;

struct fd_directive_s {
    const char *name;
    fd_conf_type_t type;
    size_t offset;
    const char *def;              /* default, parsed like a value; NULL none */
    const fd_conf_enum_t *enums;  /* FD_CONF_ENUM */
    /* FD_CONF_CUSTOM, or FD_CONF_LIST parsed by the module (a repeatable
     * key, one call per value): FD_OK or FD_ERROR after fd_conf_error() */
    int (*set)(fd_conf_t *cf, const fd_directive_t *d, void *conf,
               const char *value);
    /* FD_CONF_INT, SIZE, MSEC: the value must be within min .. max (both
     * 0: unbounded); checked where the key is read, so the error names
     * its file:line and a module needs no code for it */
    int64_t min, max;
    /* A key that no longer exists here: using it is an error that names
     * the key to use instead (and the doc says why). It has no meaning,
     * so it clashes with nothing (fd_conf_check_levels). */
    const char *renamed;
    /* A list whose inherited lines ([http]'s in a [server], a
     * [server]'s in a [location]) a section's own lines replace rather
     * than extend, as nginx merges a list it inherits */
    unsigned replace:1;
    /* A location key of the location's handler: several handler modules
     * may declare one name (pass = for proxy and fastcgi), each parsing
     * it its own way. A location's value goes to the declaration of its
     * handler module, applied once the handler is known (the key may come
     * before handler =); a module that is not the handler never sees it.
     * Only such declarations may share a name (fd_conf_check_levels). */
    unsigned handler_key:1;
    /* Its value begins with a $variable a request sets (auth_request_set
     * = $user ...): declared (fd_var_get_set) before the file is applied,
     * so that any key may read it; several keys may set one. */
    unsigned declares:1;
    const char *doc;
};

#define FD_CONF_END {.name = NULL}

/* One key = value line as read, with where it came from. Each section
 * header also yields an entry with an empty key (the section marker). */
typedef struct fd_conf_entry_s {
    char *section;
    char *key;
    char *value;
    const char *file;
    int line;
    unsigned section_seq; /* which section instance (two [server] differ) */
} fd_conf_entry_t;

typedef struct fd_conf_pos_s fd_conf_pos_t;

struct fd_conf_s {
    fd_pool_t *pool;       /* lives as long as the loaded configuration */
    fd_cycle_t *cycle;
    const char *file;      /* position of the entry being applied */
    int line;
    const char *main_file; /* for errors about the file as a whole */
    fd_pool_t *temp;       /* freed after the load */
    fd_conf_pos_t *set;    /* where each key was set, newest first (temp) */
    const char *prefix;    /* relative paths resolve against it */
    char err[1024];        /* "file:line: message" after an error */
    /* the line being applied to a location is its [location]'s own, not
     * one inherited from [http] or [server] (a public-API module's set) */
    int own_line;
};

/*
 * Relative paths in the configuration (root, logs, pid, mime_types, ...)
 * resolve against the prefix: the directory above the one that holds the
 * main config file (the repository for conf/fastd.conf, PREFIX after
 * make install). Returns a pool copy.
 */
char *fd_conf_path(fd_conf_t *cf, const char *path);

/* fastd -t (and -s): the configuration is checked, and nothing is
 * created or changed on disk (a module that would create a file at load
 * checks that it could). */
extern int fd_conf_test;

/*
 * Every configuration error goes through here: it is prefixed with
 * cf->file:cf->line, the position of the entry being applied (the loader
 * keeps it set while directive handlers and module hooks run). Without one
 * (an error about the file as a whole) it names the main file.
 */
int fd_conf_error(fd_conf_t *cf, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Move cf's position to where key was last set in the conf block conf
 * (fd_conf_set records it), for checks made later than the key was read
 * (init_conf). 1 if found; else the position stays (the section header).
 */
int fd_conf_at_key(fd_conf_t *cf, const void *conf, const char *key);

/* Parse one value of directive d into conf; FD_OK or FD_ERROR. */
int fd_conf_set(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                const char *value);
/* Apply every directive's default to conf. */
int fd_conf_defaults(fd_conf_t *cf, const fd_directive_t *d, void *conf);
const fd_directive_t *fd_conf_find(const fd_directive_t *d, const char *key);

/* Value parsers shared with modules; -1 on a bad value. A size or a
 * duration is at most FD_CONF_VALUE_MAX (in bytes or milliseconds): a
 * bound on the running total, so no sum of parts can overflow, and room
 * for the caller to add it to a clock. */
#define FD_CONF_VALUE_MAX (INT64_MAX / 4)
int64_t fd_conf_parse_size(const char *s);
int64_t fd_conf_parse_msec(const char *s);
int fd_conf_parse_flag(const char *s);
/* Digits only (no sign, no space), at most max; -1 otherwise. */
int64_t fd_conf_parse_uint(const char *s, int64_t max);
/* A bound of a key of type as its errors write it (64k, 75s). */
void fd_conf_fmt_bound(char *buf, size_t n, fd_conf_type_t type, int64_t v);
/* value among enums: *out its value, or FD_ERROR after the error an
 * enum key gives ("key" must be one of a | b, not "x"; did you mean). */
int fd_conf_parse_enum(fd_conf_t *cf, const char *key,
                       const fd_conf_enum_t *enums, const char *value,
                       int *out);

/*
 * "Did you mean": feed the names valid where an unknown one was written;
 * fd_conf_near_best() is the closest by edit distance (Damerau: a swap of
 * two neighbours counts one), or NULL when none is close enough to be a
 * typo of it.
 */
typedef struct {
    const char *name;
    const char *best;
    unsigned dist;
} fd_conf_near_t;

void fd_conf_near_init(fd_conf_near_t *nr, const char *name);
void fd_conf_near_add(fd_conf_near_t *nr, const char *candidate);
void fd_conf_near_table(fd_conf_near_t *nr, const fd_directive_t *d);
const char *fd_conf_near_best(const fd_conf_near_t *nr);
/* "; did you mean \"NAME\"?" for an error message, or "" */
const char *fd_conf_near_hint(const fd_conf_near_t *nr, char *buf, size_t n);
unsigned fd_conf_distance(const char *a, const char *b);

/*
 * The directive tables that one level of the configuration accepts ([http]
 * takes its own keys and every location key as defaults; [server] its own
 * and the location keys). A key name must mean one thing in all of them:
 * the same declaration, reached from several levels, is fine; two
 * declarations of one name is a clash. FD_OK, or FD_ERROR with err set.
 */
typedef struct {
    const char *level;                 /* "[http]" */
    const fd_directive_t *const *tables; /* NULL-ended */
} fd_conf_level_t;

int fd_conf_check_levels(const fd_conf_level_t *levels, unsigned n,
                         char *err, size_t errlen);

/*
 * A configuration held in memory (a one-line command's, core/fd_cli.c):
 * from now on the path name reads text instead of a file, for the start
 * and for every reload. fd_conf_memory_name() is that name or NULL.
 */
void fd_conf_memory(const char *name, const char *text);
const char *fd_conf_memory_name(void);

/* Read a file (and its includes) into entries; used by fd_cycle_load. */
int fd_conf_read(fd_conf_t *cf, const char *path, fd_conf_entry_t **entries,
                 unsigned *n);

#endif
