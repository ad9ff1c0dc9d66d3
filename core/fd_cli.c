/*
 * One-line commands, as Caddy has them: fastd reverse-proxy, file-server and
 * respond. Each writes the INI text of a whole configuration (foreground,
 * the error log on stderr, no pid file, nothing under /var or /run, so it
 * runs as any user beside a system fastd) and hands it to the normal
 * loader through fd_conf_memory(): the engine, the checks and the error
 * messages are those of a configuration file, and --print-config prints a
 * file `fastd -c` runs as it is.
 *
 * Per-request logging is off, as Caddy's are by default; --access-log
 * writes one line per request to stdout.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include "fd_core.h"
#include "fd_cli.h"
#include "fd_conf.h"

#define CLI_MAX_TO 64
#define CLI_USAGE 2 /* exit status of a command line fastd refuses */

/* An address as a user writes it: [http[s]://][HOST][:PORT]. */
typedef struct {
    int tls;
    int any;             /* no host: every address */
    int ip;              /* host is an address literal */
    int v6;
    char host[256];      /* without brackets */
    unsigned port;
} cli_addr_t;

typedef struct {
    const char *name;    /* reverse-proxy, file-server, respond */
    const char *from;    /* --from / --listen */
    const char *cert, *key;
    const char *workers;
    const char *to[CLI_MAX_TO];
    unsigned nto;
    const char *root;
    const char *status;
    const char *text;
    int browse;
    int access_log;
    int change_host;
    int print;
    int exit_status;     /* when it cannot run; 0: CLI_USAGE */
    const char *user;
} cli_t;

typedef struct {
    const char *name;
    const char *synopsis;
    const char *help;    /* the command's own options */
} cli_command_t;

static const char common_help[] =
    "  --cert FILE         PEM certificate for an https:// address (with "
    "--key);\n"
    "                      without them a self-signed one for its host is "
    "made and\n"
    "                      kept in $XDG_DATA_HOME/fastd (~/.local/share/"
    "fastd)\n"
    "  --key FILE          PEM private key of --cert\n"
    "  --workers N|auto    worker processes (default auto: one per CPU)\n"
    "  --user NAME         started as root: the user the workers run as\n"
    "                      (default: root, the user who ran the command)\n"
    "  --access-log        one line per request on stdout (default: none)\n"
    "  --print-config      print the configuration it would run (an INI "
    "file for\n"
    "                      fastd -c FILE) and exit\n"
    "  -h, --help          print this help and exit\n"
    "\n"
    "ADDR: [http://|https://][HOST][:PORT], or PORT. No host: every IPv4 "
    "address;\n"
    "localhost: 127.0.0.1; another name: every address, as its "
    "server_name. The\n"
    "port defaults to 80 (443 with https://). fastd stays in the "
    "foreground, logs\n"
    "to stderr and stops on Ctrl-C (SIGINT), exit status 0; a bad command "
    "line exits\n"
    "with 2, a configuration or start error with 1.\n";

static const cli_command_t commands[] = {
    {"reverse-proxy", "--to ADDR [--to ADDR]... [--from ADDR]",
     "Proxies every request to the --to servers (several are balanced, "
     "round robin).\n\n"
     "  --from ADDR         where to listen (default :8080); https://HOST "
     "for TLS\n"
     "  --to ADDR           a backend, repeatable: [http://|https://]HOST"
     "[:PORT];\n"
     "                      no host is 127.0.0.1; https:// backends are "
     "verified\n"
     "                      (against the system's CAs, for the first one's "
     "host)\n"
     "  --change-host-header  send the backend's HOST:PORT as Host (default:"
     " the\n"
     "                      client's Host)\n"},
    {"file-server", "[--root DIR] [--listen ADDR] [--browse]",
     "Serves the files under DIR.\n\n"
     "  --root DIR          the directory to serve (default: the current "
     "one)\n"
     "  --listen ADDR       where to listen (default :8080); https://HOST "
     "for TLS\n"
     "  --browse            list a directory that has no index.html\n"},
    {"respond", "[--listen ADDR] [--status CODE] [TEXT]",
     "Answers every request with CODE and TEXT (text/plain; $variables such "
     "as $uri\n"
     "or $remote_addr are expanded).\n\n"
     "  --listen ADDR       where to listen (default :8080); https://HOST "
     "for TLS\n"
     "  --status CODE       the status, 200..599 (default 200)\n"},
};

void fd_cli_usage(FILE *fp)
{
    unsigned i;

    for (i = 0; i < fd_nelems(commands); i++)
        fprintf(fp, "       fastd %s %s\n", commands[i].name,
                commands[i].synopsis);
}

static void command_help(const cli_command_t *c, FILE *fp)
{
    fprintf(fp, "usage: fastd %s %s [OPTIONS]\n\n%s%s", c->name, c->synopsis,
            c->help, common_help);
}

static int fail(const cli_t *cli, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int fail(const cli_t *cli, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "fastd %s: ", cli->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see fastd %s --help)\n", cli->name);
    return FD_ERROR;
}

static int parse_port(const char *s, unsigned *port)
{
    int64_t n = fd_conf_parse_uint(s, 65535);

    if (n < 1)
        return FD_ERROR;
    *port = (unsigned)n;
    return FD_OK;
}

static int parse_addr(const cli_t *cli, const char *opt, const char *arg,
                      cli_addr_t *a)
{
    const char *p = arg, *colon, *end;
    char port[16], v6[sizeof(struct in6_addr)];
    size_t n;

    memset(a, 0, sizeof(*a));
    if (strncasecmp(p, "https://", 8) == 0) {
        a->tls = 1;
        p += 8;
    } else if (strncasecmp(p, "http://", 7) == 0) {
        p += 7;
    }
    end = p + strlen(p);
    if (end > p && end[-1] == '/')
        end--; /* http://host:8080/ is the address still */
    if (memchr(p, '/', (size_t)(end - p)) || memchr(p, '?', (size_t)(end - p)))
        return fail(cli, "%s \"%s\": an address has no path", opt, arg);
    if (*p == '[') {
        const char *rb = memchr(p, ']', (size_t)(end - p));
        if (rb == NULL || (size_t)(rb - p - 1) >= sizeof(a->host))
            return fail(cli, "%s \"%s\": no \"]\" after an IPv6 address",
                        opt, arg);
        memcpy(a->host, p + 1, (size_t)(rb - p - 1));
        if (inet_pton(AF_INET6, a->host, v6) != 1)
            return fail(cli, "%s \"%s\": \"%s\" is not an IPv6 address", opt,
                        arg, a->host);
        a->ip = a->v6 = 1;
        colon = rb + 1 < end ? rb + 1 : NULL;
        if (colon && *colon != ':')
            return fail(cli, "%s \"%s\": \":PORT\" after \"]\"", opt, arg);
    } else {
        colon = memchr(p, ':', (size_t)(end - p));
        if (colon && memchr(colon + 1, ':', (size_t)(end - colon - 1)))
            return fail(cli, "%s \"%s\": an IPv6 address goes in brackets "
                        "([::1]:8080)", opt, arg);
        n = (size_t)((colon ? colon : end) - p);
        if (n >= sizeof(a->host))
            return fail(cli, "%s \"%s\": the host is too long", opt, arg);
        memcpy(a->host, p, n);
        a->host[n] = '\0';
        if (colon == NULL && n > 0 && strspn(a->host, "0123456789") == n) {
            colon = p - 1; /* "8080": a port alone */
            a->host[0] = '\0';
        }
    }
    a->port = a->tls ? 443 : 80;
    if (colon) {
        n = (size_t)(end - colon - 1);
        if (n >= sizeof(port))
            return fail(cli, "%s \"%s\": bad port", opt, arg);
        memcpy(port, colon + 1, n);
        port[n] = '\0';
        if (parse_port(port, &a->port) != FD_OK)
            return fail(cli, "%s \"%s\": the port must be 1..65535", opt,
                        arg);
    }
    if (a->host[0] == '\0') {
        a->any = 1;
        return FD_OK;
    }
    if (!a->ip) {
        struct in_addr v4;
        a->ip = inet_pton(AF_INET, a->host, &v4) == 1;
    }
    if (!a->ip && strspn(a->host, "abcdefghijklmnopqrstuvwxyz"
                                  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") !=
                      strlen(a->host))
        return fail(cli, "%s \"%s\": \"%s\" is not a host name", opt, arg,
                    a->host);
    return FD_OK;
}

/* --- a self-signed certificate, made here and kept for the next run --- */

/* Is the PEM certificate in path good for another day? */
static int cert_usable(const char *path)
{
    FILE *fp = fopen(path, "r");
    X509 *x;
    time_t day;
    int ok;

    if (fp == NULL)
        return 0;
    x = PEM_read_X509(fp, NULL, NULL, NULL);
    fclose(fp);
    if (x == NULL)
        return 0;
    day = time(NULL) + 86400;
    ok = X509_cmp_time(X509_get0_notAfter(x), &day) > 0;
    X509_free(x);
    return ok;
}

static int write_pem(const char *path, EVP_PKEY *pkey, X509 *x)
{
    FILE *fp;
    int fd, ok;

    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
              pkey ? 0600 : 0644);
    if (fd < 0 || (fp = fdopen(fd, "w")) == NULL) {
        if (fd >= 0)
            close(fd);
        return FD_ERROR;
    }
    ok = pkey ? PEM_write_PrivateKey(fp, pkey, NULL, NULL, 0, NULL, NULL)
              : PEM_write_X509(fp, x);
    return fclose(fp) == 0 && ok ? FD_OK : FD_ERROR;
}

/* An ECDSA P-256 certificate for name (its CN and subjectAltName), valid
 * for a year. */
static int make_cert(const char *name, int ip, const char *crt,
                     const char *key)
{
    char san[300];
    unsigned char serial[16];
    EVP_PKEY *pkey = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    X509_EXTENSION *ext = NULL;
    X509V3_CTX ctx;
    BIGNUM *bn = NULL;
    int rc = FD_ERROR;

    if (pkey == NULL || x == NULL || RAND_bytes(serial, sizeof(serial)) != 1)
        goto done;
    serial[0] &= 0x7f; /* a positive serial */
    bn = BN_bin2bn(serial, sizeof(serial), NULL);
    if (bn == NULL || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) ||
        !X509_set_version(x, X509_VERSION_3) ||
        !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
        !X509_gmtime_adj(X509_getm_notAfter(x), 365L * 86400) ||
        !X509_set_pubkey(x, pkey) ||
        !X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN",
                                    MBSTRING_ASC, (const unsigned char *)name,
                                    -1, -1, 0) ||
        !X509_set_issuer_name(x, X509_get_subject_name(x)))
        goto done;
    if (strcmp(name, "localhost") == 0)
        snprintf(san, sizeof(san), "DNS:localhost,IP:127.0.0.1,IP:::1");
    else
        snprintf(san, sizeof(san), "%s:%s", ip ? "IP" : "DNS", name);
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
    ext = X509V3_EXT_conf_nid(NULL, &ctx, NID_subject_alt_name, san);
    if (ext == NULL || !X509_add_ext(x, ext, -1) ||
        !X509_sign(x, pkey, EVP_sha256()))
        goto done;
    if (write_pem(key, pkey, NULL) == FD_OK &&
        write_pem(crt, NULL, x) == FD_OK)
        rc = FD_OK;
done:
    X509_EXTENSION_free(ext);
    BN_free(bn);
    X509_free(x);
    EVP_PKEY_free(pkey);
    ERR_clear_error();
    return rc;
}

static int self_signed(const cli_t *cli, const cli_addr_t *a, char *crt,
                       char *key, size_t size)
{
    const char *data = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    const char *name = a->any ? "localhost" : a->host;
    char dir[PATH_MAX], file[256];
    struct stat st;
    size_t i;

    /* the base must exist: a home is nobody's to make (nobody's is
     * /nonexistent) */
    if (data && *data == '/' && stat(data, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(dir, sizeof(dir), "%s/fastd", data);
    else if (home && *home == '/' && stat(home, &st) == 0 &&
             S_ISDIR(st.st_mode))
        snprintf(dir, sizeof(dir), "%s/.local/share/fastd", home);
    else
        return fail(cli, "no home directory to keep a self-signed "
                    "certificate in: give --cert and --key");
    /* the file's name is the host's, made safe: a v6 address has colons */
    snprintf(file, sizeof(file), "%s", name);
    for (i = 0; file[i]; i++)
        if (file[i] == ':')
            file[i] = '_';
    if (fd_mkdirs(dir, 0, 0700, NULL) != FD_OK)
        return fail(cli, "cannot make \"%s\": %s", dir, strerror(errno));
    if ((size_t)snprintf(crt, size, "%s/self-signed-%s.crt", dir, file) >=
            size ||
        (size_t)snprintf(key, size, "%s/self-signed-%s.key", dir, file) >=
            size)
        return fail(cli, "\"%s\": the path is too long", dir);
    if (cert_usable(crt) && access(key, R_OK) == 0)
        return FD_OK;
    if (make_cert(name, a->ip && !a->any, crt, key) != FD_OK)
        return fail(cli, "cannot make a self-signed certificate in \"%s\"",
                    dir);
    fprintf(stderr, "fastd %s: made a self-signed certificate for %s: %s\n",
            cli->name, name, crt);
    return FD_OK;
}

/* --- the configuration --- */

/* A text the INI line "key = TEXT" keeps as it is: inih ends a value at
 * " ;" (an inline comment) and trims its ends (the quotes keep them). */
static int ini_safe(const char *s)
{
    for (; *s; s++)
        if ((s[0] == ' ' || s[0] == '\t') && s[1] == ';')
            return 0;
    return 1;
}

static void listen_lines(FILE *f, const cli_addr_t *a, const char *crt,
                         const char *key)
{
    const char *ip = a->any                              ? "0.0.0.0"
                     : a->ip                             ? a->host
                     : strcmp(a->host, "localhost") == 0 ? "127.0.0.1"
                                                         : "0.0.0.0";

    fprintf(f, "[server]\nlisten = %s%s%s:%u%s\n", a->v6 ? "[" : "", ip,
            a->v6 ? "]" : "", a->port, a->tls ? " ssl http2" : "");
    if (!a->any && !a->ip)
        fprintf(f, "server_name = %s\n", a->host);
    if (a->tls)
        fprintf(f, "ssl_certificate = %s\nssl_certificate_key = %s\n", crt,
                key);
}

static int build(cli_t *cli, int argc, char **argv, char **text)
{
    char crt[PATH_MAX], key[PATH_MAX], root[PATH_MAX];
    cli_addr_t from, to[CLI_MAX_TO];
    const char *scheme = "http";
    size_t len;
    unsigned i;
    FILE *f;
    int j;

    if (parse_addr(cli, "--listen", cli->from ? cli->from : ":8080",
                   &from) != FD_OK)
        return FD_ERROR;
    if (!from.tls && (cli->cert || cli->key))
        return fail(cli, "--cert and --key are for an https:// address");
    if ((cli->cert == NULL) != (cli->key == NULL))
        return fail(cli, "--cert and --key go together");
    for (i = 0; i < cli->nto; i++) {
        if (parse_addr(cli, "--to", cli->to[i], &to[i]) != FD_OK)
            return FD_ERROR;
        if (to[i].tls != to[0].tls)
            return fail(cli, "--to: every backend http://, or every one "
                        "https://");
        if (to[i].tls && strcmp(to[i].host, to[0].host) != 0)
            return fail(cli, "--to https://: every backend has the same "
                        "host, the name its certificate is checked for");
        if (to[i].any) {
            strcpy(to[i].host, "127.0.0.1");
            to[i].any = 0;
            to[i].ip = 1;
        }
    }
    if (cli->nto && to[0].tls)
        scheme = "https";
    if (cli->root) {
        struct stat st;
        if (realpath(cli->root, root) == NULL || stat(root, &st) < 0)
            return fail(cli, "--root \"%s\": %s", cli->root, strerror(errno));
        if (!S_ISDIR(st.st_mode))
            return fail(cli, "--root \"%s\" is not a directory", cli->root);
    }
    if (cli->text && !ini_safe(cli->text))
        return fail(cli, "the text cannot hold \" ;\" (a configuration "
                    "file's comment)");
    if (from.tls) {
        if (cli->cert) {
            if (realpath(cli->cert, crt) == NULL)
                return fail(cli, "--cert \"%s\": %s", cli->cert,
                            strerror(errno));
            if (realpath(cli->key, key) == NULL)
                return fail(cli, "--key \"%s\": %s", cli->key,
                            strerror(errno));
        } else if (self_signed(cli, &from, crt, key, sizeof(crt)) != FD_OK) {
            cli->exit_status = 1; /* the command line was fine */
            return FD_ERROR;
        }
    }

    f = open_memstream(text, &len);
    if (f == NULL)
        return fail(cli, "out of memory");
    fprintf(f, "; fastd");
    for (j = 0; j < argc; j++) {
        const char *a = argv[j];
        if (strcmp(a, "--print-config") == 0)
            continue;
        int plain = *a && strspn(a, "abcdefghijklmnopqrstuvwxyz"
                                    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                    "-_./:=@%+,[]") == strlen(a);
        if (plain) {
            fprintf(f, " %s", a);
            continue;
        }
        fputs(" '", f);
        for (; *a; a++)
            if (*a == '\'')
                fputs("'\\''", f);
            else
                fputc(*a, f);
        fputc('\'', f);
    }
    fprintf(f, "\n; run as a file with: fastd -c FILE\n\n"
               "[main]\n"
               "daemon = off\n"
               "workers = %s\n"
               "pid = off\n"
               "error_log = stderr\n",
            cli->workers ? cli->workers : "auto");
    /* a command runs as whoever ran it, as Caddy's: started as root, the
     * workers stay root unless --user says otherwise (a file's [main]
     * without user would give them to nobody, who cannot read what root
     * asked to serve), and the configuration says so */
    if (cli->user)
        fprintf(f, "user = %s\n", cli->user);
    else if (geteuid() == 0)
        fprintf(f, "user = root         ; as who ran it (--user NAME: that "
                   "user)\n");
    fputc('\n', f);
    if (cli->access_log)
        fprintf(f, "[http]\naccess_log = /dev/stdout\n\n");
    listen_lines(f, &from, crt, key);
    if (cli->root)
        fprintf(f, "root = %s\n", root);
    if (cli->browse)
        fprintf(f, "autoindex = on\n");
    if (cli->nto) {
        fprintf(f, "\n[location /]\nhandler = proxy\npass = %s://backend\n",
                scheme);
        if (cli->change_host)
            fprintf(f, "proxy_host = upstream\n");
        if (to[0].tls)
            fprintf(f, "proxy_ssl_name = %s\n", to[0].host);
        fprintf(f, "\n[upstream backend]\n");
        for (i = 0; i < cli->nto; i++)
            fprintf(f, "server = %s%s%s:%u\n", to[i].v6 ? "[" : "",
                    to[i].host, to[i].v6 ? "]" : "", to[i].port);
    }
    if (strcmp(cli->name, "respond") == 0)
        fprintf(f, "\n[location /]\nreturn = %s%s%s%s\n",
                cli->status ? cli->status : "200",
                cli->text && *cli->text ? " \"" : "",
                cli->text ? cli->text : "",
                cli->text && *cli->text ? "\"" : "");
    if (fclose(f) != 0)
        return fail(cli, "out of memory");
    return FD_OK;
}

enum {
    OPT_FROM = 256,
    OPT_TO,
    OPT_CERT,
    OPT_KEY,
    OPT_WORKERS,
    OPT_ACCESS_LOG,
    OPT_PRINT,
    OPT_ROOT,
    OPT_BROWSE,
    OPT_STATUS,
    OPT_CHANGE_HOST,
    OPT_USER,
};

int fd_cli_command(int argc, char **argv, const char **conf, int *status)
{
    static const struct option common[] = {
        {"help", no_argument, NULL, 'h'},
        {"cert", required_argument, NULL, OPT_CERT},
        {"key", required_argument, NULL, OPT_KEY},
        {"workers", required_argument, NULL, OPT_WORKERS},
        {"user", required_argument, NULL, OPT_USER},
        {"access-log", no_argument, NULL, OPT_ACCESS_LOG},
        {"print-config", no_argument, NULL, OPT_PRINT},
    };
    static const struct option own[][4] = {
        {{"from", required_argument, NULL, OPT_FROM},
         {"to", required_argument, NULL, OPT_TO},
         {"change-host-header", no_argument, NULL, OPT_CHANGE_HOST}},
        {{"listen", required_argument, NULL, OPT_FROM},
         {"root", required_argument, NULL, OPT_ROOT},
         {"browse", no_argument, NULL, OPT_BROWSE}},
        {{"listen", required_argument, NULL, OPT_FROM},
         {"status", required_argument, NULL, OPT_STATUS}},
    };
    struct option opts[fd_nelems(common) + 4];
    const cli_command_t *c = NULL;
    cli_t cli = {0};
    char *text = NULL;
    unsigned i, n = 0;
    int opt, j;

    for (i = 0; i < fd_nelems(commands); i++)
        if (strcmp(argv[0], commands[i].name) == 0)
            c = &commands[i];
    if (c == NULL)
        return FD_DECLINED;
    cli.name = c->name;
    *status = CLI_USAGE;
    /* an argument is a line of the INI text, and its comment */
    for (j = 1; j < argc; j++)
        for (const char *s = argv[j]; *s; s++)
            if ((unsigned char)*s < 0x20 || *s == 0x7f) {
                fail(&cli, "a control character in \"%s\"", argv[j]);
                return FD_DONE;
            }
    memcpy(opts, common, sizeof(common));
    n = fd_nelems(common);
    for (i = 0; i < 3 && own[c - commands][i].name; i++)
        opts[n++] = own[c - commands][i];
    opts[n] = (struct option){0};

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 'h':
            command_help(c, stdout);
            *status = 0;
            return FD_DONE;
        case OPT_FROM: cli.from = optarg; break;
        case OPT_CERT: cli.cert = optarg; break;
        case OPT_KEY: cli.key = optarg; break;
        case OPT_WORKERS: cli.workers = optarg; break;
        case OPT_USER: cli.user = optarg; break;
        case OPT_ACCESS_LOG: cli.access_log = 1; break;
        case OPT_PRINT: cli.print = 1; break;
        case OPT_ROOT: cli.root = optarg; break;
        case OPT_BROWSE: cli.browse = 1; break;
        case OPT_STATUS: cli.status = optarg; break;
        case OPT_CHANGE_HOST: cli.change_host = 1; break;
        case OPT_TO:
            if (cli.nto == CLI_MAX_TO) {
                fail(&cli, "at most %d --to", CLI_MAX_TO);
                return FD_DONE;
            }
            cli.to[cli.nto++] = optarg;
            break;
        default: /* getopt said what */
            fprintf(stderr, "usage: fastd %s %s (see fastd %s --help)\n",
                    c->name, c->synopsis, c->name);
            return FD_DONE;
        }
    }
    if (strcmp(c->name, "respond") == 0 && optind < argc)
        cli.text = argv[optind++];
    if (optind < argc) {
        fail(&cli, "unexpected argument \"%s\"", argv[optind]);
        return FD_DONE;
    }
    if (strcmp(c->name, "reverse-proxy") == 0 && cli.nto == 0) {
        fail(&cli, "--to ADDR is required");
        return FD_DONE;
    }
    if (strcmp(c->name, "file-server") == 0 && cli.root == NULL)
        cli.root = ".";
    if (cli.status) {
        int64_t code = fd_conf_parse_uint(cli.status, 999);
        if (code < 200 || code > 599) {
            fail(&cli, "--status \"%s\": 200..599", cli.status);
            return FD_DONE;
        }
    }
    if (cli.workers && strcmp(cli.workers, "auto") != 0 &&
        fd_conf_parse_uint(cli.workers, 1024) < 1) {
        fail(&cli, "--workers \"%s\": a number or auto", cli.workers);
        return FD_DONE;
    }
    if (build(&cli, argc, argv, &text) != FD_OK) {
        free(text);
        if (cli.exit_status)
            *status = cli.exit_status;
        return FD_DONE;
    }
    if (cli.print) {
        fputs(text, stdout);
        free(text);
        *status = 0;
        return FD_DONE;
    }
    /* the text lives as long as the process: a reload reads it again */
    fd_conf_memory(c->name, text);
    *conf = c->name;
    return FD_OK;
}
