#include "net/egress.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E_INVALID SL_E_EGRESS_POLICY_INVALID

static int refuse(struct sl_error *err, const char *field, const char *text, const char *why)
{
    return sl_error_set(err, E_INVALID, EINVAL, "%s: '%.80s' %s", field, text, why);
}

/* "443" or "8000-8999" */
static int parse_ports(const char *s, uint16_t *lo, uint16_t *hi)
{
    char *end;
    errno = 0;
    unsigned long a = strtoul(s, &end, 10);
    if (errno || end == s || !isdigit((unsigned char)s[0]) || a < 1 || a > 65535)
        return -1;
    unsigned long b = a;
    if (*end == '-') {
        const char *t = end + 1;
        if (!isdigit((unsigned char)*t))
            return -1;
        b = strtoul(t, &end, 10);
        if (errno || b < a || b > 65535)
            return -1;
    }
    if (*end)
        return -1;
    *lo = (uint16_t)a;
    *hi = (uint16_t)b;
    return 0;
}

/* A DNS name: labels of letters, digits, '-' and '_', 1..63 each, not
 * starting or ending with '-'; at least two labels (a rule for a bare
 * "com" is a wildcard's job). */
static bool domain_ok(const char *d)
{
    size_t len = strlen(d);
    if (len == 0 || len > SL_EGRESS_DOMAIN_MAX || !strchr(d, '.'))
        return false;
    size_t label = 0;
    for (size_t i = 0; i <= len; i++) {
        char c = d[i];
        if (c == '.' || c == '\0') {
            if (label == 0 || label > 63 || d[i - 1] == '-')
                return false;
            label = 0;
            continue;
        }
        if (!(isalnum((unsigned char)c) || c == '-' || c == '_'))
            return false;
        if (label == 0 && c == '-')
            return false;
        label++;
    }
    return true;
}

int sl_egress_rule_parse(const char *text, const char *field, struct sl_egress_rule *out,
                         struct sl_error *err)
{
    memset(out, 0, sizeof(*out));
    size_t len = strlen(text);
    if (len == 0 || len > SL_EGRESS_DOMAIN_MAX + 2 + 12)
        return refuse(err, field, text, "is not an address, a network or a domain name");
    if (text[0] == '[' || strchr(text, ':') != strrchr(text, ':'))
        return refuse(err, field, text,
                      "is IPv6: the private network is IPv4 only, so no IPv6 rule can apply");
    char host[SL_EGRESS_DOMAIN_MAX + 16];
    snprintf(host, sizeof(host), "%s", text);
    char *colon = strchr(host, ':');
    if (colon) {
        *colon = '\0';
        if (parse_ports(colon + 1, &out->port_lo, &out->port_hi) < 0)
            return refuse(err, field, text,
                          "has a bad port: give one port (1-65535) or a range such as 8000-8999");
    }
    char *slash = strchr(host, '/');
    struct in_addr a;
    if (slash) {
        *slash = '\0';
        char *end;
        errno = 0;
        long prefix = strtol(slash + 1, &end, 10);
        if (errno || end == slash + 1 || *end || prefix < 0 || prefix > 32 ||
            !isdigit((unsigned char)slash[1]))
            return refuse(err, field, text, "has a bad prefix length: give 0 to 32");
        if (inet_pton(AF_INET, host, &a) != 1)
            return refuse(err, field, text, "is not an IPv4 network");
        out->prefix = (int)prefix;
    } else if (inet_pton(AF_INET, host, &a) == 1) {
        out->prefix = 32;
    } else {
        /* A name: "*." then a name for a wildcard, lower-cased, one
         * trailing dot dropped. */
        const char *name = host;
        if (strncmp(name, "*.", 2) == 0) {
            out->wildcard = true;
            name += 2;
        }
        size_t n = strlen(name);
        if (n > 0 && name[n - 1] == '.')
            n--;
        if (n > SL_EGRESS_DOMAIN_MAX)
            return refuse(err, field, text, "is longer than a domain name can be");
        for (size_t i = 0; i < n; i++)
            out->domain[i] = (char)tolower((unsigned char)name[i]);
        out->domain[n] = '\0';
        if (!domain_ok(out->domain))
            return refuse(err, field, text,
                          "is not an IPv4 address, a CIDR network or a domain name "
                          "(\"example.com\", \"*.example.com\", each with an optional \":port\")");
        out->is_domain = true;
        return 0;
    }
    uint32_t mask = out->prefix ? htonl(~0u << (32 - out->prefix)) : 0;
    out->addr = a.s_addr & mask; /* host bits may be set, as Python's strict=False */
    return 0;
}

static int parse_list(const json_t *obj, const char *key, struct sl_egress_rule **rules,
                      size_t *n, struct sl_error *err)
{
    *rules = NULL;
    *n = 0;
    const json_t *list = json_object_get(obj, key);
    if (!list || json_is_null(list))
        return 0;
    if (!json_is_array(list))
        return sl_error_set(err, E_INVALID, EINVAL, "egress.%s must be a list of strings", key);
    size_t count = json_array_size(list);
    if (count > SL_EGRESS_MAX_RULES)
        return sl_error_set(err, E_INVALID, E2BIG,
                            "egress.%s has %zu rules; at most %d are allowed", key, count,
                            SL_EGRESS_MAX_RULES);
    if (count == 0)
        return 0;
    *rules = calloc(count, sizeof(**rules));
    if (!*rules)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    for (size_t i = 0; i < count; i++) {
        char field[48];
        snprintf(field, sizeof(field), "egress.%s[%zu]", key, i);
        const json_t *v = json_array_get(list, i);
        if (!json_is_string(v)) {
            free(*rules);
            *rules = NULL;
            return sl_error_set(err, E_INVALID, EINVAL, "%s must be a string", field);
        }
        if (sl_egress_rule_parse(json_string_value(v), field, &(*rules)[i], err) < 0) {
            free(*rules);
            *rules = NULL;
            return -1;
        }
    }
    *n = count;
    return 0;
}

int sl_egress_parse(const json_t *obj, struct sl_egress_policy *out, struct sl_error *err)
{
    memset(out, 0, sizeof(*out));
    if (!json_is_object(obj))
        return sl_error_set(err, E_INVALID, EINVAL,
                            "egress must be an object: {\"default\": \"allow\"|\"deny\", "
                            "\"allow\": [...], \"deny\": [...]}");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        if (strcmp(key, "default") && strcmp(key, "allow") && strcmp(key, "deny"))
            return sl_error_set(err, E_INVALID, EINVAL,
                                "egress.%.40s is not a field (default, allow, deny)", key);
    }
    const json_t *d = json_object_get(obj, "default");
    if (d && !json_is_null(d)) {
        const char *t = json_is_string(d) ? json_string_value(d) : "";
        if (strcmp(t, "allow") == 0)
            out->dflt = SL_EGRESS_ALLOW;
        else if (strcmp(t, "deny") == 0)
            out->dflt = SL_EGRESS_DENY;
        else
            return sl_error_set(err, E_INVALID, EINVAL,
                                "egress.default must be \"allow\" or \"deny\"");
    }
    if (parse_list(obj, "allow", &out->allow, &out->n_allow, err) < 0)
        return -1;
    if (parse_list(obj, "deny", &out->deny, &out->n_deny, err) < 0) {
        sl_egress_free(out);
        return -1;
    }
    return 0;
}

void sl_egress_rule_text(const struct sl_egress_rule *r, char *out, size_t size)
{
    int n;
    if (r->is_domain) {
        n = snprintf(out, size, "%s%s", r->wildcard ? "*." : "", r->domain);
    } else {
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &r->addr, a, sizeof(a));
        n = r->prefix == 32 ? snprintf(out, size, "%s", a)
                            : snprintf(out, size, "%s/%d", a, r->prefix);
    }
    if (n < 0 || (size_t)n >= size || !r->port_lo)
        return;
    if (r->port_lo == r->port_hi)
        snprintf(out + n, size - (size_t)n, ":%u", r->port_lo);
    else
        snprintf(out + n, size - (size_t)n, ":%u-%u", r->port_lo, r->port_hi);
}

static json_t *list_json(const struct sl_egress_rule *rules, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        char text[300];
        sl_egress_rule_text(&rules[i], text, sizeof(text));
        json_array_append_new(a, json_string(text));
    }
    return a;
}

json_t *sl_egress_to_json(const struct sl_egress_policy *p)
{
    return json_pack("{s:s,s:o,s:o}", "default", p->dflt == SL_EGRESS_DENY ? "deny" : "allow",
                     "allow", list_json(p->allow, p->n_allow), "deny",
                     list_json(p->deny, p->n_deny));
}

static int copy_list(struct sl_egress_rule **dst, const struct sl_egress_rule *src, size_t n)
{
    *dst = NULL;
    if (n == 0)
        return 0;
    *dst = malloc(n * sizeof(*src));
    if (!*dst)
        return -1;
    memcpy(*dst, src, n * sizeof(*src));
    return 0;
}

int sl_egress_copy(struct sl_egress_policy *dst, const struct sl_egress_policy *src)
{
    *dst = (struct sl_egress_policy){.dflt = src->dflt, .n_allow = src->n_allow,
                                     .n_deny = src->n_deny};
    if (copy_list(&dst->allow, src->allow, src->n_allow) < 0 ||
        copy_list(&dst->deny, src->deny, src->n_deny) < 0) {
        sl_egress_free(dst);
        return -1;
    }
    return 0;
}

static bool rule_equal(const struct sl_egress_rule *a, const struct sl_egress_rule *b)
{
    return a->is_domain == b->is_domain && a->wildcard == b->wildcard &&
           strcmp(a->domain, b->domain) == 0 && a->addr == b->addr && a->prefix == b->prefix &&
           a->port_lo == b->port_lo && a->port_hi == b->port_hi;
}

bool sl_egress_equal(const struct sl_egress_policy *a, const struct sl_egress_policy *b)
{
    if (a->dflt != b->dflt || a->n_allow != b->n_allow || a->n_deny != b->n_deny)
        return false;
    for (size_t i = 0; i < a->n_allow; i++)
        if (!rule_equal(&a->allow[i], &b->allow[i]))
            return false;
    for (size_t i = 0; i < a->n_deny; i++)
        if (!rule_equal(&a->deny[i], &b->deny[i]))
            return false;
    return true;
}

void sl_egress_free(struct sl_egress_policy *p)
{
    free(p->allow);
    free(p->deny);
    p->allow = p->deny = NULL;
    p->n_allow = p->n_deny = 0;
}

bool sl_egress_domain_matches(const struct sl_egress_rule *r, const char *name)
{
    if (!r->is_domain)
        return false;
    if (!r->wildcard)
        return strcmp(r->domain, name) == 0;
    size_t n = strlen(name), d = strlen(r->domain);
    return n > d + 1 && name[n - d - 1] == '.' && strcmp(name + n - d, r->domain) == 0;
}

enum sl_egress_answer sl_egress_answer_for(const struct sl_egress_policy *p, const char *name)
{
    for (size_t i = 0; i < p->n_allow; i++)
        if (sl_egress_domain_matches(&p->allow[i], name))
            return SL_EGRESS_LEARN;
    for (size_t i = 0; i < p->n_deny; i++)
        if (sl_egress_domain_matches(&p->deny[i], name))
            return SL_EGRESS_REFUSE;
    return p->dflt == SL_EGRESS_DENY ? SL_EGRESS_REFUSE : SL_EGRESS_ANSWER;
}
