/* /openapi.json, generated from the route table (api/routes.c) so that it
 * lists exactly the routes that exist, with the prose of api/openapi.json
 * (compiled in at build time, like the pages): the schemas with a
 * description for every field, and per operation its description, its
 * examples and the error codes it can answer by status. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api/errors.h"
#include "api/router.h"
#include "common/cleanup.h"
#include "openapi_json.h"

/* The prose, parsed once for the life of the process. */
static json_t *prose;
static pthread_once_t prose_once = PTHREAD_ONCE_INIT;
static void parse_prose(void) { prose = json_loadb(sl_doc_openapi, SL_DOC_OPENAPI_LEN, 0, NULL); }

static json_t *prose_get(const char *section)
{
    pthread_once(&prose_once, parse_prose);
    return json_object_get(prose, section);
}

const json_t *sl_openapi_request_fields(const char *schema)
{
    return json_object_get(json_object_get(prose_get("schemas"), schema), "properties");
}

static json_t *ref(const char *schema)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "#/components/schemas/%s", schema);
    return json_pack("{s:{s:{s:{s:s}}}}", "content", "application/json", "schema", "$ref", buf);
}

/* A parameter's description: the operation's own for that name when it
 * has one (an `offset` that is not a page's), else the shared one. */
static json_t *parameter(const json_t *info, const char *name, const char *in, bool required,
                         const char *type)
{
    const char *desc = json_string_value(json_object_get(json_object_get(info, "parameters"), name));
    if (!desc)
        desc = json_string_value(json_object_get(prose_get("parameters"), name));
    json_t *p = json_pack("{s:s,s:s,s:b,s:{s:s}}", "name", name, "in", in, "required", required,
                          "schema", "type", type);
    if (desc)
        json_object_set_new(p, "description", json_string(desc));
    return p;
}

static const char *status_reason(const char *status)
{
    static const struct {
        const char *status, *text;
    } reasons[] = {{"400", "Bad request"},      {"401", "No or a wrong token"},
                   {"403", "Forbidden"},        {"404", "Not found"},
                   {"406", "Not acceptable"},   {"409", "Conflict with the sandbox's state"},
                   {"413", "Body too large"},   {"421", "Misdirected (Host not allowed)"},
                   {"422", "Validation failed"}, {"429", "Too many at once"},
                   {"501", "Not supported here"}, {"503", "Unavailable now: retry later"},
                   {"507", "No space"}};
    for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
        if (strcmp(reasons[i].status, status) == 0)
            return reasons[i].text;
    return "Error";
}

/* One response per status the operation can answer, naming its codes
 * (x-error-codes, and in the description for readers). */
static void add_errors(json_t *responses, const json_t *errors)
{
    const char *status;
    json_t *codes;
    json_object_foreach((json_t *)errors, status, codes)
    {
        char text[1024];
        int n = snprintf(text, sizeof(text), "%s", status_reason(status));
        size_t i;
        json_t *code;
        json_array_foreach(codes, i, code)
        {
            if (n < 0 || (size_t)n >= sizeof(text))
                break;
            n += snprintf(text + n, sizeof(text) - (size_t)n, "%s`%s`", i ? ", " : ": ",
                          json_string_value(code));
        }
        json_t *resp = ref("Error");
        json_object_set_new(resp, "description", json_string(text));
        json_object_set(resp, "x-error-codes", codes);
        json_object_set_new(responses, status, resp);
    }
}

static json_t *operation(const struct sl_route_def *r)
{
    const json_t *info = json_object_get(prose_get("operations"), r->op_id);
    json_t *op = json_pack("{s:s,s:s}", "operationId", r->op_id, "summary", r->summary);
    const char *desc = json_string_value(json_object_get(info, "description"));
    if (desc)
        json_object_set_new(op, "description", json_string(desc));
    json_t *params = json_array();
    /* Path parameters from the pattern. */
    for (const char *p = r->pattern; (p = strchr(p, '{'));) {
        const char *end = strchr(p, '}');
        if (!end)
            break;
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(end - p - 1), p + 1);
        if (strcmp(name, "*") == 0)
            snprintf(name, sizeof(name), "path"); /* a tail route's rest of the path */
        json_array_append_new(params, parameter(info, name, "path", true, "string"));
        p = end;
    }
    for (const struct sl_query_param *q = r->query; q && q->name; q++)
        json_array_append_new(params, parameter(info, q->name, "query", q->required, q->type));
    if (json_array_size(params))
        json_object_set_new(op, "parameters", params);
    else
        json_decref(params);
    if (r->request_schema) {
        json_t *body = ref(r->request_schema);
        json_object_set_new(body, "required", json_true());
        json_t *example = json_object_get(info, "requestExample");
        if (example)
            json_object_set(json_object_get(json_object_get(body, "content"), "application/json"),
                            "example", example);
        json_object_set_new(op, "requestBody", body);
    }
    json_t *ok = r->response_schema ? ref(r->response_schema) : json_object();
    /* An event stream (text/event-stream) its operation describes. */
    const char *events = json_string_value(json_object_get(info, "eventStream"));
    if (events && !r->response_schema)
        json_object_set_new(ok, "content",
                            json_pack("{s:{s:{s:s,s:s}}}", "text/event-stream", "schema", "type",
                                      "string", "description", events));
    json_object_set_new(ok, "description", json_string(r->created ? "Created" : "OK"));
    json_t *example = json_object_get(info, "responseExample");
    if (example && r->response_schema)
        json_object_set(json_object_get(json_object_get(ok, "content"), "application/json"),
                        "example", example);
    json_t *err = ref("Error");
    json_object_set_new(err, "description",
                        json_string("Any other error: a 500 (SANDBOX_INTERNAL_ERROR) carries no "
                                    "detail"));
    /* A WebSocket route answers 101 and speaks the messages it describes. */
    const char *ws = json_string_value(json_object_get(info, "webSocket"));
    if (ws) {
        json_decref(ok);
        ok = json_pack("{s:s}", "description", ws);
    }
    json_t *responses = json_pack("{s:o,s:o}", ws ? "101" : r->created ? "201" : "200", ok,
                                  "default", err);
    add_errors(responses, json_object_get(info, "errors"));
    json_object_set_new(op, "responses", responses);
    if (r->auth)
        json_object_set_new(op, "security", json_pack("[{s:[]}]", "bearer"));
    return op;
}

/* Pages and their assets are not part of the API (API.md §3.3), nor is
 * the worker protocol (API.md §9: replica to owner). */
static bool documented(const struct sl_route_def *r)
{
    return strcmp(r->pattern, "/admin") != 0 && strncmp(r->pattern, "/admin/", 7) != 0 &&
           strncmp(r->pattern, "/docs/", 6) != 0 &&
           !r->internal && r->credential == SL_CRED_BEARER;
}

json_t *sl_openapi_document(void)
{
    json_t *paths = json_object();
    for (size_t i = 0; i < sl_routes_len; i++) {
        const struct sl_route_def *r = &sl_routes[i];
        if (!documented(r))
            continue;
        /* A tail route's "{*}" is its "{path}" here (OpenAPI names it). */
        char shown[256];
        snprintf(shown, sizeof(shown), "%s", r->pattern);
        char *star = strstr(shown, "{*}");
        if (star)
            snprintf(star, sizeof(shown) - (size_t)(star - shown), "{path}");
        json_t *item = json_object_get(paths, shown);
        if (!item) {
            item = json_object();
            json_object_set_new(paths, shown, item);
        }
        char method[16];
        size_t n = strlen(r->method);
        for (size_t k = 0; k <= n && k < sizeof(method); k++)
            method[k] = (char)(r->method[k] >= 'A' && r->method[k] <= 'Z' ? r->method[k] + 32
                                                                           : r->method[k]);
        json_object_set_new(item, method, operation(r));
    }
    json_t *schemas = prose_get("schemas");
    return json_pack(
        "{s:s,s:{s:s,s:s,s:s},s:o,s:{s:O,s:{s:{s:s,s:s,s:s}}}}", "openapi", "3.1.0", "info",
        "title", "Sandloom", "version", "0.3.0", "description",
        "The Sandloom API: sandboxes for AI agents (resolve, create, run, files, templates, "
        "suspend and resume), with the reference service's routes, fields and codes. Every "
        "error is {\"detail\": {\"code\", \"message\"}}; routes with a lock need "
        "'Authorization: Bearer <token>'.",
        "paths", paths, "components", "schemas", schemas ? schemas : json_object(),
        "securitySchemes", "bearer", "type", "http", "scheme", "bearer", "description",
        "SANDBOX_INTERNAL_TOKEN (state/internal-token under make run)");
}
