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
 * Written on the public API (core/api/fastd.h) alone: its keys parsed by
 * set(), its access hook active only where there are rules.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "fastd.h"

typedef struct {
    uint8_t deny;
    fd_api_cidr_t net;  /* family 0: all */
} acl_rule_t;

typedef struct {
    acl_rule_t *rules;  /* what this location checks, in order */
    unsigned n, cap;
    int own;            /* the rules are the [location]'s own */
} acl_conf_t;

/* digits only, 0 .. max: the prefix length; -1 for anything else */
static int prefix_len(const char *s, unsigned max)
{
    unsigned v = 0;
    size_t i;

    if (*s == '\0' || strlen(s) > 3)
        return -1;
    for (i = 0; s[i]; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    return v <= max ? (int)v : -1;
}

/*
 * ADDR or ADDR/BITS, nothing else: inet_pton() for the address (it takes
 * no spaces, no leading zeros in IPv4) and digits only for the prefix
 * length, so "/-0", "/+8", "/ 8" and "1.2.3.4/" are errors, not rules. A
 * rule is a security boundary: "10.1.2.3/8" is refused rather than read
 * as 10.0.0.0/8 (nginx warns and widens it), since it is as likely a host
 * with a mistyped length.
 */
static int parse_rule(const char *key, const char *v, acl_rule_t *rule)
{
    char text[INET6_ADDRSTRLEN + 8], net[INET6_ADDRSTRLEN], *slash;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0,
                                       0, 0, 0, 0, 0xff, 0xff};
    unsigned max, i, bits;
    int pl;
    uint8_t masked[16];

    if (strcmp(v, "all") == 0)
        return FD_OK; /* family 0 */
    if (strlen(v) >= sizeof(text)) {
        fd_api_conf_error("%s: bad address \"%s\"", key, v);
        return FD_ERROR;
    }
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
        fd_api_conf_error("%s: \"%s\" is not an address, CIDR or all", key,
                          v);
        return FD_ERROR;
    }
    bits = max;
    if (slash) {
        if ((pl = prefix_len(slash, max)) < 0) {
            fd_api_conf_error("%s: bad prefix length in \"%s\" (digits, "
                              "0 .. %u)", key, v, max);
            return FD_ERROR;
        }
        bits = (unsigned)pl;
    }
    rule->net.bits = (uint8_t)bits;
    for (i = 0; i < max / 8; i++) {
        unsigned keep = bits >= 8 * (i + 1) ? 8
                        : bits > 8 * i      ? (unsigned)(bits - 8 * i)
                                            : 0;
        masked[i] = rule->net.addr[i] & (uint8_t)(0xff00 >> keep);
    }
    if (memcmp(masked, rule->net.addr, max / 8) != 0) {
        inet_ntop(rule->net.family, masked, net, sizeof(net));
        fd_api_conf_error("%s: \"%s\" has bits set below the prefix "
                          "length: write %s/%u for the network or %s for "
                          "the one address", key, v, net, rule->net.bits,
                          text);
        return FD_ERROR;
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

/* allow = / deny = lines, in order: [http]'s and [server]'s add up; a
 * [location]'s own first line drops what it inherited */
static int acl_set(void *conf, const char *key, const char *v, int own)
{
    acl_conf_t *ac = conf;
    acl_rule_t rule = {.deny = key[0] == 'd'}, *rules;

    if (parse_rule(key, v, &rule) != FD_OK)
        return FD_ERROR;
    if (own && !ac->own) {
        ac->own = 1;
        ac->n = 0;
    }
    if (ac->n == ac->cap) {
        unsigned cap = ac->cap ? ac->cap * 2 : 4;
        rules = fd_api_conf_alloc(cap * sizeof(*rules));
        if (rules == NULL) {
            fd_api_conf_error("out of memory");
            return FD_ERROR;
        }
        if (ac->n)
            memcpy(rules, ac->rules, ac->n * sizeof(*rules));
        ac->rules = rules;
        ac->cap = cap;
    }
    ac->rules[ac->n++] = rule;
    return FD_OK;
}

static int acl_access(fd_request_t *r)
{
    const acl_conf_t *ac = fd_req_conf_of(r, FD_API_SELF);
    fd_api_addr_t a; /* the client's, after real_ip */
    unsigned i;

    fd_req_client(r, &a);
    for (i = 0; i < ac->n; i++) {
        const acl_rule_t *rule = &ac->rules[i];
        if (rule->net.family == 0 || fd_api_cidr_match(&rule->net, 1, &a)) {
            if (!rule->deny)
                return FD_OK;
            if (a.family) {
                char text[INET6_ADDRSTRLEN];
                fd_str_t path = fd_req_path(r);
                inet_ntop(a.family, a.addr, text, sizeof(text));
                fd_api_log(FD_API_LOG_INFO, 0, "access forbidden by rule, "
                           "client: %s, path: %.*s", text, (int)path.len,
                           path.data);
            }
            return 403;
        }
    }
    return FD_OK;
}

static const fd_api_key_t acl_keys[] = {
    {.name = "allow", .type = FD_API_LIST,
     .doc = "CIDR | all, repeatable: clients that may pass (IPv4 or IPv6); "
            "rules are checked in order with deny, the first match wins; a "
            "location with rules of its own ignores [http]/[server] ones. "
            "ADDR or ADDR/BITS: BITS is digits, 0..32 (IPv4) or 0..128, and "
            "ADDR has no bits set below it (10.0.0.0/8, not 10.1.2.3/8)"},
    {.name = "deny", .type = FD_API_LIST,
     .doc = "CIDR | all, repeatable: clients that get 403"},
    {.name = NULL}};

/* a request of a location without rules pays nothing */
static int acl_active(const void *conf)
{
    return ((const acl_conf_t *)conf)->n > 0;
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "acl",
    .keys = acl_keys,
    .conf_size = sizeof(acl_conf_t),
    .set = acl_set,
    .access = acl_access,
    .active = acl_active,
};
