/* server/openapi.h: the OpenAPI 3.0 document of the REST API.
 *
 * server/openapi.json is embedded into the binary at build time
 * (server/embed.cmake), so the service publishes the document it was built
 * with, wherever it is installed. */
#ifndef KILN_SERVER_OPENAPI_H
#define KILN_SERVER_OPENAPI_H

#include <stddef.h>

extern const char kiln_openapi_json[];     /* NUL-terminated */
extern const size_t kiln_openapi_json_len; /* without the NUL */

#endif
