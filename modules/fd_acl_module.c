/*
 * Access control by client address, in the access phase:
 *
 *   allow = CIDR | all
 *   deny  = CIDR | all
 *
 * Repeatable, checked in the order written; the first rule that matches
 * the client decides (nginx semantics); no match: allowed. A denied
 * request gets 403. IPv4 (10.0.0.0/8, 127.0.0.1) and IPv6 (::1,
 * 2001:db8::/32); an IPv4 rule also matches an IPv4-mapped IPv6 client
 * (::ffff:10.1.2.3) of a [::] listener.
 *
 * A [location] with rules of its own uses only those; one without inherits
 * the rules of [http] and [server] (which add up, [http]'s first).
 */
#include <arpa/inet.h>
#include <sys/socket.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_http.h"

typedef struct {
    uint8_t deny;
    fd_cidr_t net;      /* family 0: all */
} acl_rule_t;

typedef struct {
    acl_rule_t *rules;  /* as applied: [http], [server], then own */
    unsigned n, cap;
    acl_rule_t *eff;    /* what this location checks (init_conf) */
    unsigned neff;
} acl_conf_t;

fd_module_t fd_acl_module;

/*
 * ADDR or ADDR/BITS, nothing else: inet_pton() for the address (it takes
 * no spaces, no leading zeros in IPv4) and digits only for the prefix
 * length, so "/-0", "/+8", "/ 8" and "1.2.3.4/" are errors, not rules. A
 * rule is a security boundary: "10.1.2.3/8" is refused rather than read
 * as 10.0.0.0/8 (nginx warns and widens it), since it is as likely a host
 * with a mistyped length.
 */
static int parse_rule(fd_conf_t *cf, const fd_directive_t *d, const char *v,
                      acl_rule_t *rule)
{
    char text[INET6_ADDRSTRLEN + 8], net[INET6_ADDRSTRLEN], *slash;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0,
                                       0, 0, 0, 0, 0xff, 0xff};
    unsigned max, i;
    int64_t bits;
    uint8_t masked[16];

    if (strcmp(v, "all") == 0)
        return FD_OK; /* family 0 */
    if (strlen(v) >= sizeof(text))
        return fd_conf_error(cf, "%s: bad address \"%s\"", d->name, v);
    strcpy(text, v);
    slash = strchr(text, '/');
    if (slash)
        *slash++ = '\0';
    if (inet_pton(AF_INET, text, rule->net.addr) == 1) {
        rule->net.family = AF_INET;
        max = 32;
    } else if (inet_pton(AF_INET6, text, rule->net.addr) == 1) {
        rule->net.family = AF_INET6;
        max = 128;
    } else {
        return fd_conf_error(cf, "%s: \"%s\" is not an address, CIDR or "
                             "all", d->name, v);
    }
    bits = max;
    if (slash && (bits = fd_conf_parse_uint(slash, max)) < 0)
        return fd_conf_error(cf, "%s: bad prefix length in \"%s\" (digits, "
                             "0 .. %u)", d->name, v, max);
    rule->net.bits = (uint8_t)bits;
    for (i = 0; i < max / 8; i++) {
        unsigned keep = bits >= 8 * (i + 1) ? 8
                        : bits > 8 * i      ? (unsigned)(bits - 8 * i)
                                            : 0;
        masked[i] = rule->net.addr[i] & (uint8_t)(0xff00 >> keep);
    }
    if (memcmp(masked, rule->net.addr, max / 8) != 0) {
        inet_ntop(rule->net.family, masked, net, sizeof(net));
        return fd_conf_error(cf, "%s: \"%s\" has bits set below the prefix "
                             "length: write %s/%u for the network or %s "
                             "for the one address", d->name, v, net,
                             rule->net.bits, text);
    }
    /* ::ffff:10.0.0.0/104 is the IPv4 rule 10.0.0.0/8: it then matches
     * the client of an IPv4 listener too */
    if (rule->net.family == AF_INET6 && rule->net.bits >= 96 &&
        memcmp(rule->net.addr, mapped, 12) == 0) {
        memmove(rule->net.addr, rule->net.addr + 12, 4);
        memset(rule->net.addr + 4, 0, 12);
        rule->net.family = AF_INET;
        rule->net.bits -= 96;
    }
    return FD_OK;
}

static int set_rule(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                    const char *v)
{
    acl_conf_t *ac = conf;
    acl_rule_t rule = {.deny = d->name[0] == 'd'}, *rules;

    if (parse_rule(cf, d, v, &rule) != FD_OK)
        return FD_ERROR;
    rules = fd_parray_reserve(cf->pool, ac->rules, ac->n, &ac->cap,
                              sizeof(*rules));
    if (rules == NULL)
        return fd_conf_error(cf, "out of memory");
    rules[ac->n++] = rule;
    ac->rules = rules;
    return FD_OK;
}

static int acl_init_conf(fd_conf_t *cf, fd_http_loc_t *loc, void *conf)
{
    acl_conf_t *ac = conf;
    unsigned inherited = ac->n;

    (void)cf;
    /* the server's implicit location holds the [http] and [server] rules,
     * already applied when its [location]s are loaded */
    if (loc != loc->server->root_loc)
        inherited = ((acl_conf_t *)fd_loc_conf(loc->server->root_loc,
                                               &fd_acl_module))
                        ->n;
    if (ac->n > inherited) {
        ac->eff = ac->rules + inherited;
        ac->neff = ac->n - inherited;
    } else {
        ac->eff = ac->rules;
        ac->neff = ac->n;
    }
    return FD_OK;
}

static int acl_access(fd_request_t *r)
{
    acl_conf_t *ac = fd_loc_conf(r->loc, &fd_acl_module);
    fd_addr_t a; /* the client's, after real_ip */
    unsigned i;

    if (ac->neff == 0)
        return FD_OK;
    fd_request_addr(r, &a);
    for (i = 0; i < ac->neff; i++) {
        const acl_rule_t *rule = &ac->eff[i];
        if (rule->net.family == 0 || fd_cidr_match(&rule->net, 1, &a)) {
            if (!rule->deny)
                return FD_OK;
            fd_log_error(FD_LOG_INFO, 0, "access forbidden by rule, "
                         "%s", r->loc->name);
            return 403;
        }
    }
    return FD_OK;
}

static const fd_directive_t acl_directives[] = {
    {.name = "allow", .type = FD_CONF_LIST, .offset = 0, .set = set_rule,
     .doc = "CIDR | all, repeatable: clients that may pass (IPv4 or IPv6); "
            "rules are checked in order with deny, the first match wins; a "
            "location with rules of its own ignores [http]/[server] ones. "
            "ADDR or ADDR/BITS: BITS is digits, 0..32 (IPv4) or 0..128, and "
            "ADDR has no bits set below it (10.0.0.0/8, not 10.1.2.3/8)"},
    {.name = "deny", .type = FD_CONF_LIST, .offset = 0, .set = set_rule,
     .doc = "CIDR | all, repeatable: clients that get 403"},
    FD_CONF_END};

static int acl_loc_active(const fd_http_loc_t *loc)
{
    return ((acl_conf_t *)fd_loc_conf(loc, &fd_acl_module))->neff > 0;
}

fd_module_t fd_acl_module = {
    FD_MODULE_LOC(acl, acl_conf_t),
    .access = acl_access,
    .loc_active = acl_loc_active,
};
