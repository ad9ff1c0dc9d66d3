/*
 * Accept-Encoding negotiation, shared by the response compressors (gzip,
 * brotli) and the precompressed files of static (gzip_static).
 */
#include "fd_core.h"
#include "fd_http_accept.h"

/* q-value at s ("1", "0.5", "0.000"): 0..1000, or -1 when malformed. */
static int parse_q(const char *s, const char *end)
{
    int q = 0, digits = 0;

    if (s == end || (*s != '0' && *s != '1'))
        return -1;
    q = (*s++ - '0') * 1000;
    if (s < end && *s == '.') {
        int scale = 100;
        for (s++; s < end && *s >= '0' && *s <= '9' && digits < 3; s++) {
            q += (*s - '0') * scale;
            scale /= 10;
            digits++;
        }
    }
    if (s != end || q > 1000)
        return -1;
    return q;
}

unsigned fd_http_accept_encoding(fd_str_t ae, unsigned offered)
{
    const char *p = ae.data, *end;
    int q_gzip = -1, q_br = -1, q_star = -1, q_identity = -1, best;

    if (ae.len == 0 || offered == 0)
        return 0; /* no header: ae.data may be NULL, and NULL + 0 is UB */
    end = ae.data + ae.len;

    while (p < end) {
        const char *tok, *tok_end, *item_end;
        int q = 1000;

        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        if (p == end)
            break;
        tok = p;
        while (p < end && *p != ',' && *p != ';' && *p != ' ' && *p != '\t')
            p++;
        tok_end = p;
        item_end = memchr(p, ',', (size_t)(end - p));
        if (item_end == NULL)
            item_end = end;
        /* parameters: only q matters */
        while (p < item_end) {
            const char *v, *ve;
            while (p < item_end && (*p == ' ' || *p == '\t' || *p == ';'))
                p++;
            if (p + 1 < item_end && (p[0] == 'q' || p[0] == 'Q')) {
                const char *e = p + 1;
                while (e < item_end && (*e == ' ' || *e == '\t'))
                    e++;
                if (e < item_end && *e == '=') {
                    v = e + 1;
                    while (v < item_end && (*v == ' ' || *v == '\t'))
                        v++;
                    ve = v;
                    while (ve < item_end && *ve != ';' && *ve != ' ' &&
                           *ve != '\t')
                        ve++;
                    q = parse_q(v, ve);
                    if (q < 0)
                        q = 0; /* malformed: not acceptable */
                    p = ve;
                    continue;
                }
            }
            while (p < item_end && *p != ';')
                p++;
        }
        p = item_end;
        {
            fd_str_t t = {(size_t)(tok_end - tok), tok};
            if (fd_str_caseeq_lit(t, "gzip") || fd_str_caseeq_lit(t, "x-gzip"))
                q_gzip = fd_max(q_gzip, q);
            else if (fd_str_caseeq_lit(t, "br"))
                q_br = fd_max(q_br, q);
            else if (fd_str_eq_lit(t, "*"))
                q_star = q;
            else if (fd_str_caseeq_lit(t, "identity"))
                q_identity = q;
        }
    }
    if (q_gzip < 0)
        q_gzip = q_star;
    if (q_br < 0)
        q_br = q_star;
    if (!(offered & FD_ENC_GZIP))
        q_gzip = -1;
    if (!(offered & FD_ENC_BR))
        q_br = -1;
    best = fd_max(q_gzip, q_br);
    if (best <= 0 || (q_identity >= 0 && best < q_identity))
        return 0;
    return q_br == best ? FD_ENC_BR : FD_ENC_GZIP;
}
