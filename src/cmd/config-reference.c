/* Prints docs/CONFIGURATION.md (`make docs`): the configuration table and
 * its prose, or why they disagree (exit 1). Not installed. */
#include <stdio.h>
#include <stdlib.h>

#include "config/config.h"

int main(void)
{
    struct sl_error err = {0};
    if (sl_config_write_reference(stdout, &err) < 0) {
        fprintf(stderr, "config-reference: %s\n", err.message);
        return EXIT_FAILURE;
    }
    return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
