#!/bin/bash
# HEALTHCHECK: GET /healthz on the container's own port (bash's /dev/tcp, so
# the image needs no curl). Healthy when the answer is 200.
exec 3<>/dev/tcp/127.0.0.1/"${KILN_PORT:-5000}" || exit 1
printf 'GET /healthz HTTP/1.0\r\nHost: localhost:%s\r\n\r\n' "${KILN_PORT:-5000}" >&3
IFS= read -r -t 5 status <&3 || exit 1
case "$status" in
  "HTTP/1."?" 200 "*) exit 0 ;;
  *) echo "healthz: $status"; exit 1 ;;
esac
