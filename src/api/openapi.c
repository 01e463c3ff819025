/* /openapi.json, generated from the route table (api/routes.c) so that it
 * lists exactly the routes that exist; schemas are written out here. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api/router.h"
#include "common/cleanup.h"

static const char SCHEMAS[] =
    "{"
    "\"Error\":{\"type\":\"object\",\"required\":[\"detail\"],\"properties\":{\"detail\":{"
    "\"type\":\"object\",\"required\":[\"code\",\"message\"],\"properties\":{"
    "\"code\":{\"type\":\"string\"},\"message\":{\"type\":\"string\"},"
    "\"errors\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
    "\"loc\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},\"type\":{\"type\":\"string\"},"
    "\"msg\":{\"type\":\"string\"}}}}}}}},"
    "\"ResolveRequest\":{\"type\":\"object\",\"required\":[\"sandbox_id\",\"workspace_scope_id\"],"
    "\"properties\":{\"sandbox_id\":{\"type\":\"string\",\"minLength\":3,\"maxLength\":128,"
    "\"pattern\":\"^[A-Za-z0-9_.:-]+$\"},\"workspace_scope_id\":{\"type\":\"string\","
    "\"minLength\":1,\"maxLength\":191},\"profile\":{\"type\":\"string\",\"minLength\":1,"
    "\"maxLength\":64,\"default\":\"coding-default\"}}},"
    "\"RouteResponse\":{\"type\":\"object\",\"properties\":{\"sandbox_id\":{\"type\":\"string\"},"
    "\"worker_id\":{\"type\":\"string\"},\"worker_epoch\":{\"type\":\"string\"},"
    "\"worker_endpoint\":{\"type\":\"string\"},\"generation\":{\"type\":\"integer\"},"
    "\"sandbox_uid\":{\"type\":\"integer\"},\"status\":{\"type\":\"string\"},"
    "\"storage_mode\":{\"type\":\"string\",\"enum\":[\"local\",\"shared\"]}}},"
    "\"RouteRecord\":{\"type\":\"object\",\"description\":\"Every column of the route row; "
    "timestamps are naive UTC ISO-8601.\",\"additionalProperties\":true},"
    "\"AuditResponse\":{\"type\":\"object\",\"additionalProperties\":true},"
    "\"ConnectRequest\":{\"type\":\"object\",\"required\":[\"generation\"],\"properties\":{"
    "\"generation\":{\"type\":\"integer\",\"minimum\":1}}},"
    "\"ConnectResponse\":{\"type\":\"object\",\"properties\":{\"sandbox_id\":{\"type\":\"string\"},"
    "\"generation\":{\"type\":\"integer\"},\"uid\":{\"type\":\"integer\"},"
    "\"status\":{\"type\":\"string\"}}},"
    "\"ReleaseResponse\":{\"type\":\"object\",\"properties\":{\"status\":{\"type\":\"string\","
    "\"enum\":[\"RELEASED\"]}}},"
    "\"ExecRequest\":{\"type\":\"object\",\"required\":[\"exec_id\",\"generation\",\"argv\"],"
    "\"properties\":{\"exec_id\":{\"type\":\"string\",\"minLength\":3,\"maxLength\":128,"
    "\"pattern\":\"^[A-Za-z0-9_.:-]+$\"},\"generation\":{\"type\":\"integer\",\"minimum\":1},"
    "\"argv\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":256,\"items\":{\"type\":\"string\","
    "\"maxLength\":65536}},\"cwd\":{\"type\":\"string\",\"maxLength\":4096,"
    "\"default\":\"/workspace\"},\"env\":{\"type\":\"object\",\"maxProperties\":128,"
    "\"additionalProperties\":{\"type\":\"string\",\"maxLength\":65536}},"
    "\"sensitive_env\":{\"type\":\"object\",\"maxProperties\":8,\"additionalProperties\":{"
    "\"type\":\"string\"}},\"timeout_seconds\":{\"type\":[\"integer\",\"null\"],\"minimum\":1,"
    "\"maximum\":86400},\"background\":{\"type\":\"boolean\",\"default\":false},"
    "\"exec_scope\":{\"type\":[\"string\",\"null\"],\"minLength\":3,\"maxLength\":128,"
    "\"pattern\":\"^[A-Za-z0-9_.:-]+$\"}}},"
    "\"ExecResponse\":{\"type\":\"object\",\"properties\":{\"exec_id\":{\"type\":\"string\"},"
    "\"status\":{\"type\":\"string\",\"enum\":[\"RUNNING\",\"SUCCEEDED\",\"FAILED\","
    "\"TIMED_OUT\",\"CANCELLED\",\"WORKER_LOST\"]},\"exit_code\":{\"type\":[\"integer\","
    "\"null\"]},\"stdout\":{\"type\":\"string\"},\"stderr\":{\"type\":\"string\"},"
    "\"duration_ms\":{\"type\":[\"integer\",\"null\"]},\"truncated\":{\"type\":\"boolean\"},"
    "\"termination_reason\":{\"type\":[\"string\",\"null\"]}}},"
    "\"AdminExec\":{\"type\":\"object\",\"properties\":{\"sandbox_id\":{\"type\":\"string\"},"
    "\"exec_id\":{\"type\":\"string\"},\"generation\":{\"type\":\"integer\"},"
    "\"worker_id\":{\"type\":\"string\"},\"status\":{\"type\":\"string\"},"
    "\"exec_scope\":{\"type\":[\"string\",\"null\"]},\"argv\":{\"type\":\"array\","
    "\"items\":{\"type\":\"string\"}},\"exit_code\":{\"type\":[\"integer\",\"null\"]},"
    "\"truncated\":{\"type\":\"boolean\"},\"started_at\":{\"type\":[\"string\",\"null\"]},"
    "\"finished_at\":{\"type\":[\"string\",\"null\"]},\"created_at\":{\"type\":\"string\"},"
    "\"duration_ms\":{\"type\":[\"integer\",\"null\"]},\"stdout\":{\"type\":\"string\"},"
    "\"stderr\":{\"type\":\"string\"}}},"
    "\"AdminExecList\":{\"type\":\"object\",\"properties\":{\"execs\":{\"type\":\"array\","
    "\"items\":{\"$ref\":\"#/components/schemas/AdminExec\"}},\"total\":{\"type\":\"integer\"},"
    "\"limit\":{\"type\":\"integer\"},\"offset\":{\"type\":\"integer\"}}},"
    "\"AdminOverview\":{\"type\":\"object\",\"properties\":{\"sandboxes_by_status\":{"
    "\"type\":\"object\"},\"sandbox_total\":{\"type\":\"integer\"},\"workers\":{\"type\":"
    "\"array\"},\"worker_total\":{\"type\":\"integer\"},\"live_worker_total\":{\"type\":"
    "\"integer\"},\"capacity_total\":{\"type\":\"integer\"},\"running_sessions_total\":{"
    "\"type\":\"integer\"},\"template_total\":{\"type\":\"integer\"},\"templates_shared\":{"
    "\"type\":\"boolean\"},\"isolation\":{\"type\":\"object\"},\"disk\":{\"type\":"
    "\"object\"},\"reclamation\":{\"type\":\"object\"},\"fleet_queries_available\":{"
    "\"type\":\"boolean\"}}},"
    "\"AdminSandboxList\":{\"type\":\"object\",\"properties\":{\"sandboxes\":{\"type\":"
    "\"array\",\"items\":{\"type\":\"object\"}},\"total\":{\"type\":\"integer\"},"
    "\"limit\":{\"type\":\"integer\"},\"offset\":{\"type\":\"integer\"}}},"
    "\"RuntimeDiagnostics\":{\"type\":\"object\",\"properties\":{\"available\":{\"type\":"
    "\"boolean\"},\"scope\":{\"type\":\"string\"},\"workers\":{\"type\":\"array\"},"
    "\"excluded_workers\":{\"type\":\"integer\"},\"truncated\":{\"type\":\"boolean\"},"
    "\"totals\":{\"type\":[\"object\",\"null\"]},\"queue_length\":{\"type\":\"null\"},"
    "\"note\":{\"type\":\"string\"}}},"
    "\"SuspendResponse\":{\"type\":\"object\",\"properties\":{\"sandbox_id\":{\"type\":"
    "\"string\"},\"generation\":{\"type\":\"integer\"},\"status\":{\"type\":\"string\"},"
    "\"snapshot\":{\"type\":\"boolean\"},\"suspended\":{\"type\":\"boolean\"},"
    "\"retained_until\":{\"type\":[\"string\",\"null\"]}}},"
    "\"ResumeResponse\":{\"type\":\"object\",\"properties\":{\"sandbox_id\":{\"type\":"
    "\"string\"},\"worker_id\":{\"type\":\"string\"},\"worker_epoch\":{\"type\":\"string\"},"
    "\"worker_endpoint\":{\"type\":\"string\"},\"generation\":{\"type\":\"integer\"},"
    "\"sandbox_uid\":{\"type\":\"integer\"},\"status\":{\"type\":\"string\"},"
    "\"storage_mode\":{\"type\":\"string\"},\"resumed\":{\"type\":\"boolean\"},"
    "\"workspace_source\":{\"type\":\"string\"}}},"
    "\"TemplatePublishRequest\":{\"type\":\"object\",\"required\":[\"generation\",\"name\"],"
    "\"properties\":{\"generation\":{\"type\":\"integer\",\"minimum\":1},\"name\":{\"type\":"
    "\"string\",\"minLength\":1,\"maxLength\":64,\"pattern\":\"^[a-z0-9][a-z0-9._-]*$\"},"
    "\"source_path\":{\"type\":\"string\",\"default\":\"/envs\",\"maxLength\":4096},"
    "\"description\":{\"type\":\"string\",\"maxLength\":1024},\"labels\":{\"type\":"
    "\"object\",\"maxProperties\":32,\"additionalProperties\":{\"type\":\"string\","
    "\"maxLength\":256}}}},"
    "\"TemplateResponse\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
    "\"digest\":{\"type\":\"string\"},\"size_bytes\":{\"type\":\"integer\"},\"mount_target\":{"
    "\"type\":\"string\"},\"created_at\":{\"type\":\"number\"},\"description\":{\"type\":"
    "\"string\"},\"source_sandbox_id\":{\"type\":\"string\"},\"labels\":{\"type\":\"object\"}}},"
    "\"TemplateAttachRequest\":{\"type\":\"object\",\"required\":[\"generation\",\"templates\"],"
    "\"properties\":{\"generation\":{\"type\":\"integer\",\"minimum\":1},\"templates\":{"
    "\"type\":\"array\",\"minItems\":1,\"maxItems\":16,\"items\":{\"type\":\"string\"}}}},"
    "\"TemplateAttachResponse\":{\"type\":\"object\",\"properties\":{\"status\":{\"type\":"
    "\"string\"},\"templates\":{\"type\":\"array\",\"items\":{\"$ref\":"
    "\"#/components/schemas/TemplateResponse\"}}}},"
    "\"TemplateList\":{\"type\":\"object\",\"properties\":{\"templates\":{\"type\":\"array\","
    "\"items\":{\"$ref\":\"#/components/schemas/TemplateResponse\"}}}},"
    "\"TemplateRemoveResponse\":{\"type\":\"object\",\"properties\":{\"status\":{\"type\":"
    "\"string\"},\"name\":{\"type\":\"string\"}}},"
    "\"CancelResponse\":{\"type\":\"object\",\"properties\":{\"cancelled\":{"
    "\"type\":\"boolean\"}}},"
    "\"FileWriteRequest\":{\"type\":\"object\",\"required\":[\"generation\",\"path\","
    "\"content_base64\"],\"properties\":{\"generation\":{\"type\":\"integer\",\"minimum\":1},"
    "\"path\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4096},\"content_base64\":{"
    "\"type\":\"string\",\"maxLength\":47185920}}},"
    "\"FileWriteResponse\":{\"type\":\"object\",\"properties\":{\"status\":{\"type\":\"string\"},"
    "\"path\":{\"type\":\"string\"}}},"
    "\"FileReadResponse\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},"
    "\"content_base64\":{\"type\":\"string\"}}},"
    "\"DirectoryListResponse\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":"
    "\"string\"},\"entries\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\"},\"path\":{\"type\":\"string\"},\"type\":{\"type\":\"string\","
    "\"enum\":[\"file\",\"directory\",\"symlink\"]},\"size_bytes\":{\"type\":\"integer\"},"
    "\"modified_at\":{\"type\":\"number\"},\"mode\":{\"type\":\"integer\"}}}},"
    "\"total\":{\"type\":\"integer\"},\"has_more\":{\"type\":\"boolean\"}}},"
    "\"MkdirRequest\":{\"type\":\"object\",\"required\":[\"generation\",\"path\"],\"properties\":{"
    "\"generation\":{\"type\":\"integer\",\"minimum\":1},\"path\":{\"type\":\"string\","
    "\"minLength\":1,\"maxLength\":4096},\"parents\":{\"type\":\"boolean\",\"default\":false}}},"
    "\"DeleteRequest\":{\"type\":\"object\",\"required\":[\"generation\",\"path\"],"
    "\"properties\":{\"generation\":{\"type\":\"integer\",\"minimum\":1},\"path\":{\"type\":"
    "\"string\",\"minLength\":1,\"maxLength\":4096},\"recursive\":{\"type\":\"boolean\","
    "\"default\":false}}},"
    "\"MoveRequest\":{\"type\":\"object\",\"required\":[\"generation\",\"source\","
    "\"destination\"],\"properties\":{\"generation\":{\"type\":\"integer\",\"minimum\":1},"
    "\"source\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4096},\"destination\":{"
    "\"type\":\"string\",\"minLength\":1,\"maxLength\":4096},\"overwrite\":{\"type\":\"boolean\","
    "\"default\":false}}},"
    "\"MoveResponse\":{\"type\":\"object\",\"properties\":{\"status\":{\"type\":\"string\"},"
    "\"source\":{\"type\":\"string\"},\"destination\":{\"type\":\"string\"}}},"
    "\"Healthz\":{\"type\":\"object\",\"additionalProperties\":true}"
    "}";

/* The schemas, parsed once for the life of the process. */
static json_t *parsed_schemas;
static pthread_once_t schemas_once = PTHREAD_ONCE_INIT;
static void parse_schemas(void) { parsed_schemas = json_loads(SCHEMAS, 0, NULL); }

const json_t *sl_openapi_request_fields(const char *schema)
{
    pthread_once(&schemas_once, parse_schemas);
    return json_object_get(json_object_get(parsed_schemas, schema), "properties");
}

static json_t *ref(const char *schema)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "#/components/schemas/%s", schema);
    return json_pack("{s:{s:{s:{s:s}}}}", "content", "application/json", "schema", "$ref", buf);
}

static json_t *operation(const struct sl_route_def *r)
{
    json_t *op = json_pack("{s:s,s:s}", "operationId", r->op_id, "summary", r->summary);
    json_t *params = json_array();
    /* Path parameters from the pattern. */
    for (const char *p = r->pattern; (p = strchr(p, '{'));) {
        const char *end = strchr(p, '}');
        if (!end)
            break;
        json_array_append_new(params, json_pack("{s:s%,s:s,s:b,s:{s:s}}", "name", p + 1,
                                                (size_t)(end - p - 1), "in", "path", "required",
                                                1, "schema", "type", "string"));
        p = end;
    }
    for (const struct sl_query_param *q = r->query; q && q->name; q++)
        json_array_append_new(params, json_pack("{s:s,s:s,s:b,s:{s:s}}", "name", q->name, "in",
                                                "query", "required", q->required, "schema",
                                                "type", q->type));
    if (json_array_size(params))
        json_object_set_new(op, "parameters", params);
    else
        json_decref(params);
    if (r->request_schema) {
        json_t *body = ref(r->request_schema);
        json_object_set_new(body, "required", json_true());
        json_object_set_new(op, "requestBody", body);
    }
    json_t *ok = r->response_schema ? ref(r->response_schema) : json_object();
    json_object_set_new(ok, "description", json_string("OK"));
    json_t *err = ref("Error");
    json_object_set_new(err, "description", json_string("Error (see detail.code)"));
    json_object_set_new(op, "responses", json_pack("{s:o,s:o}", "200", ok, "default", err));
    if (r->auth)
        json_object_set_new(op, "security", json_pack("[{s:[]}]", "bearer"));
    return op;
}

json_t *sl_openapi_document(void)
{
    json_t *paths = json_object();
    for (size_t i = 0; i < sl_routes_len; i++) {
        const struct sl_route_def *r = &sl_routes[i];
        if (strcmp(r->pattern, "/admin") == 0)
            continue; /* the console page is not part of the API (API.md §3.3) */
        json_t *item = json_object_get(paths, r->pattern);
        if (!item) {
            item = json_object();
            json_object_set_new(paths, r->pattern, item);
        }
        char method[16];
        size_t n = strlen(r->method);
        for (size_t k = 0; k <= n && k < sizeof(method); k++)
            method[k] = (char)(r->method[k] >= 'A' && r->method[k] <= 'Z' ? r->method[k] + 32
                                                                           : r->method[k]);
        json_object_set_new(item, method, operation(r));
    }
    json_t *schemas = json_loads(SCHEMAS, 0, NULL);
    return json_pack("{s:s,s:{s:s,s:s},s:o,s:{s:o,s:{s:{s:s,s:s}}}}", "openapi", "3.1.0", "info",
                     "title", "Sandloom", "version", "0.2.0", "paths", paths, "components",
                     "schemas", schemas ? schemas : json_object(), "securitySchemes", "bearer",
                     "type", "http", "scheme", "bearer");
}
