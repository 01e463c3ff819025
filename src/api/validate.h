/* Request validation in the reference's 422 shape (spec API.md §0.4):
 * every failure appends {"loc": ["body", <field|"request">], "type":
 * "invalid_request", "msg": "..."} (at most 20), never echoing the input.
 *
 * `loc` is computed exactly as the reference does (loc[0] always "body",
 * loc[1] from its whitelist), so clients matching it keep working. Ours,
 * additive: "msg" is a sentence saying which field failed, where and why
 * ("query parameter 'limit' must be an integer from 1 to 200"), and each
 * entry names the field as the client spelled it ("field": "argv[3]")
 * and where it was ("in": "body" or "query"). Limits are stated; input
 * values never are. */
#ifndef SL_API_VALIDATE_H
#define SL_API_VALIDATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sl_validation {
    json_t *errors; /* array, owned */
    /* A failure was recorded (even one whose entry could not be built, or
     * past the 20 kept): never ok again. */
    bool failed;
};

void sl_v_init(struct sl_validation *v);
void sl_v_free(struct sl_validation *v);
bool sl_v_ok(const struct sl_validation *v);
enum sl_v_in { SL_V_BODY, SL_V_QUERY };

/* Record that `field` failed: `why` completes "body field 'x' ..." or
 * "query parameter 'x' ..." (e.g. "is required"), never with the input. */
void sl_v_fail_in(struct sl_validation *v, enum sl_v_in in, const char *field, const char *why,
                  ...) __attribute__((format(printf, 4, 5)));
#define sl_v_fail(v, field, ...) sl_v_fail_in((v), SL_V_BODY, (field), __VA_ARGS__)

/* The 422's top-level message: "request validation failed: <first>" and
 * how many more. */
void sl_v_message(const struct sl_validation *v, char *buf, size_t size);

/* The API's identifier alphabet ^[A-Za-z0-9_.:-]+$. */
bool sl_v_is_identifier(const char *s);
/* Length in Unicode code points (the reference counts characters). */
size_t sl_v_utf8_len(const char *s, size_t bytes);

/* Body fields. Each returns whether the field was present and valid; on an
 * invalid value the failure is recorded under `field`. */
const char *sl_v_string(struct sl_validation *v, const json_t *obj, const char *field,
                        bool required, size_t min_chars, size_t max_chars, bool identifier,
                        const char *def);
/* Same, also returning the byte length (strings may hold NUL). */
const char *sl_v_string_n(struct sl_validation *v, const json_t *obj, const char *field,
                          bool required, size_t min_chars, size_t max_chars, size_t *len);
bool sl_v_int(struct sl_validation *v, const json_t *obj, const char *field, bool required,
              int64_t min, int64_t max, int64_t def, int64_t *out);
/* Nullable integer: *is_null set when absent or JSON null. */
bool sl_v_int_nullable(struct sl_validation *v, const json_t *obj, const char *field,
                       int64_t min, int64_t max, int64_t *out, bool *is_null);
bool sl_v_bool(struct sl_validation *v, const json_t *obj, const char *field, bool def,
               bool *out);

/* A query parameter already extracted as text (NULL = absent). */
bool sl_v_query_int(struct sl_validation *v, const char *text, const char *field, bool required,
                    int64_t min, int64_t max, int64_t def, int64_t *out);

#endif
