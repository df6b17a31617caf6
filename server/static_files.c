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

#define STATIC_INDEX_MAX (256 * 1024)

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

/* index.html with its `<base href="/">` pointing at --base-path, so that
 * the dashboard's relative URLs (scripts, styles, api/v1/..., EventSource,
 * downloads) resolve under the prefix. Without a base path: the file as is. */
#define INDEX_BASE_TAG "<base href=\"/\">"
static enum MHD_Result send_index(request *r)
{
    const char *base = r->srv->base_path;
    if (!base[0])
        return send_file(r, r->srv->web_dir, "index.html", "no-cache");
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/index.html", r->srv->web_dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return http_error(r, MHD_HTTP_NOT_FOUND, "not_found", "no such file: %s", r->url);
    char *text = malloc(STATIC_INDEX_MAX + 1), *out = NULL;
    size_t n = text ? fread(text, 1, STATIC_INDEX_MAX + 1, f) : 0;
    fclose(f);
    if (!text || n > STATIC_INDEX_MAX) {
        free(text);
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error",
                          "index.html is missing or over %d bytes", STATIC_INDEX_MAX);
    }
    text[n] = '\0';
    char *tag = strstr(text, INDEX_BASE_TAG);
    size_t bl = strlen(base);
    if (!tag || !(out = malloc(n + bl + 1))) {
        free(text);
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error",
                          "index.html has no %s to point at the base path", INDEX_BASE_TAG);
    }
    const size_t head = sizeof "<base href=\"" - 1;
    size_t pre = (size_t)(tag - text), o = pre + head;
    memcpy(out, text, o);                   /* up to and including <base href=" */
    memcpy(out + o, base, bl);
    o += bl;
    memcpy(out + o, tag + head, n - pre - head); /* /"> and the rest */
    o += n - pre - head;
    free(text);
    struct MHD_Response *resp = MHD_create_response_from_buffer(o, out, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(out);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
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
        return send_index(r);
    if (!strncmp(url, "/static/", 8) && url[8])
        return send_file(r, r->srv->static_dir, url + 8, "public, max-age=31536000, immutable");
    if (!strncmp(url, "/web/", 5) && url[5])
        return send_file(r, r->srv->web_dir, url + 5, "no-cache");
    return send_file(r, r->srv->web_dir, url + 1, "no-cache");
}
