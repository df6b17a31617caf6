/* server/static_files.c: files of the web and static folders (contract in
 * static_files.h). Files are sent from an open descriptor (sendfile), never
 * read whole into memory. */
#include "server/static_files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *ext;
    const char *type;
} content_types[] = {
    { ".html", "text/html; charset=utf-8" },
    { ".js", "text/javascript; charset=utf-8" },
    { ".mjs", "text/javascript; charset=utf-8" },
    { ".css", "text/css; charset=utf-8" },
    { ".json", "application/json" },
    { ".map", "application/json" },
    { ".png", "image/png" },
    { ".jpg", "image/jpeg" },
    { ".svg", "image/svg+xml" },
    { ".ico", "image/x-icon" },
    { ".woff2", "font/woff2" },
    { ".txt", "text/plain; charset=utf-8" },
    { ".md", "text/plain; charset=utf-8" },
};

const char *static_content_type(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof content_types / sizeof content_types[0]; i++) {
        size_t e = strlen(content_types[i].ext);
        if (n > e && !strcasecmp(name + n - e, content_types[i].ext))
            return content_types[i].type;
    }
    return "application/octet-stream";
}

bool static_path_ok(const char *path)
{
    if (!path || path[0] != '/')
        return false;
    for (const unsigned char *p = (const unsigned char *)path; *p; p++)
        if (*p < 0x20 || *p == 0x7f || *p == '\\')
            return false;
    for (const char *s = path; *s;) {
        while (*s == '/')
            s++;
        size_t n = strcspn(s, "/");
        if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
            return false;
        s += n;
    }
    return true;
}

/* Sends dir/rel. */
static enum MHD_Result send_file(request *r, const char *dir, const char *rel, const char *cache)
{
    char path[PATH_MAX], real_dir[PATH_MAX], real_file[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, rel) >= (int)sizeof path)
        return http_error(r, MHD_HTTP_NOT_FOUND, "not_found", "no such file: %s", r->url);
    if (!realpath(dir, real_dir) || !realpath(path, real_file))
        return http_error(r, MHD_HTTP_NOT_FOUND, "not_found", "no such file: %s", r->url);
    size_t dl = strlen(real_dir);
    if (strncmp(real_file, real_dir, dl) != 0 || real_file[dl] != '/')
        return http_error(r, MHD_HTTP_NOT_FOUND, "not_found", "no such file: %s", r->url);
    int fd = open(real_file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return http_error(r, MHD_HTTP_NOT_FOUND, "not_found", "no such file: %s", r->url);
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return http_error(r, MHD_HTTP_NOT_FOUND, "not_found", "no such file: %s", r->url);
    }
    struct MHD_Response *resp = MHD_create_response_from_fd((uint64_t)sb.st_size, fd);
    if (!resp) {
        close(fd);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, static_content_type(real_file));
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, cache);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    return http_queue(r, MHD_HTTP_OK, resp);
}

enum MHD_Result static_serve(request *r)
{
    const char *url = r->url;
    if (!static_path_ok(url))
        return http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_path",
                          "the path may not hold \".\" or \"..\" segments, backslashes or control bytes");
    if (!strcmp(url, "/") || !strcmp(url, "/index.html") || !strcmp(url, "/web") ||
        !strcmp(url, "/web/"))
        return send_file(r, r->srv->web_dir, "index.html", "no-cache");
    if (!strncmp(url, "/static/", 8) && url[8])
        return send_file(r, r->srv->static_dir, url + 8, "public, max-age=31536000, immutable");
    if (!strncmp(url, "/web/", 5) && url[5])
        return send_file(r, r->srv->web_dir, url + 5, "no-cache");
    return send_file(r, r->srv->web_dir, url + 1, "no-cache");
}
