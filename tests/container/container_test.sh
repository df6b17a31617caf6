#!/usr/bin/env bash
# tests/container/container_test.sh: the container images, for real (ctest:
# container_images, label `container`).
#
#  1. Lints docker/Dockerfile and docker/Dockerfile.cpu with dockerfile-utils
#     (npm, pinned in package.json): always; a lint error fails the test.
#  2. Makes the Debian 12 base offline-capable: `debootstrap --variant=minbase
#     bookworm` from Debian's mirror, cached as a tarball under
#     $KILN_TEST_CACHE (default $XDG_CACHE_HOME/kiln-test, else
#     ~/.cache/kiln-test), imported into podman as debian:12-slim.
#  3. Builds docker/Dockerfile.cpu with podman (--pull=never --format docker,
#     so the HEALTHCHECK is kept), runs it with a named data volume and
#     drives it from outside over HTTP: /healthz, the healthcheck's state,
#     sign-in with KILN_ADMIN_TOKEN, a LeNet job (1 epoch) on the demo digits
#     to done, its model download, then a stop (SIGTERM through tini) and a
#     start with the job still listed; also that the image runs as non-root
#     and has no compiler.
#
# Exit 77 (ctest: skipped) with the reason when podman, debootstrap or the
# kernel's container features are not there; never a pass. docker/Dockerfile
# (CUDA) is only linted here: its base images are NVIDIA's, which no registry
# here serves (README.md, "Running in a container").
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
t0=$(date +%s)
say() { printf 'container_test: %s\n' "$*"; }
fail() { say "FAIL: $*"; exit 1; }
skip() { say "SKIP: $*"; exit 77; }

# ---- 1. lint --------------------------------------------------------------------
lint="node_modules/dockerfile-utils/bin/dockerfile-utils"
[ -f "$lint" ] || fail "$lint is missing (run scripts/install-deps)"
for f in docker/Dockerfile docker/Dockerfile.cpu; do
  out="$(node "$lint" lint "$f" 2>&1)" || fail "dockerfile-utils lint $f:
$out"
  say "lint $f: clean"
done

# ---- 2. the tool and the base ------------------------------------------------------
command -v podman >/dev/null || skip "podman is not installed (apt-get install podman)"
podman=(podman)
[ "$(id -u)" -eq 0 ] || skip "not root: debootstrap and rootful podman need root here"
base="debian:12-slim"
cache="${KILN_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln-test}"
mkdir -p "$cache" || skip "cannot create the cache folder $cache"
if ! "${podman[@]}" image exists "$base"; then
  tarball="$cache/debian-12-minbase.tar"
  if [ ! -f "$tarball" ]; then
    command -v debootstrap >/dev/null || skip "debootstrap is not installed (apt-get install debootstrap)"
    mkdir -p "$cache"
    tmp="$(mktemp -d "$cache/rootfs.XXXXXX")"
    say "debootstrap --variant=minbase bookworm (once; cached in $tarball)"
    debootstrap --variant=minbase bookworm "$tmp" http://deb.debian.org/debian >"$cache/debootstrap.log" 2>&1 ||
      { rm -rf "$tmp"; skip "debootstrap failed (no mirror?): see $cache/debootstrap.log"; }
    rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*
    tar -C "$tmp" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$tmp"
  fi
  "${podman[@]}" import "$tarball" "$base" >/dev/null || skip "podman cannot import an image here"
fi
# How containers run here: podman's defaults first; else runc (crun refuses
# cgroups v1/hybrid hosts) and limits no higher than this process's own (no
# CAP_SYS_RESOURCE in an unprivileged CI container).
limits=(--ulimit "nofile=1024:$(ulimit -Hn)" --ulimit "nproc=4096:4096")
probe="" ok=""
for try in "" "--runtime runc"; do
  for lim in no yes; do
    opts=()
    [ "$lim" = yes ] && opts=("${limits[@]}")
    if probe="$(podman $try run --rm --pull=never "${opts[@]}" "$base" true 2>&1)"; then
      read -r -a podman <<<"podman $try"
      runopts=("${opts[@]}")
      ok=yes
      break 2
    fi
  done
done
[ -n "$ok" ] || skip "podman cannot run a container here: $probe"
say "container tool: ${podman[*]} ${runopts[*]}"

# ---- 3. build, run, drive ------------------------------------------------------------
image="localhost/kiln-test:cpu"
name="kiln-test-$$"
volume="kiln-test-data-$$"
token="kiln_container-test-token-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
cleanup() {
  "${podman[@]}" rm -f -t 5 "$name" >/dev/null 2>&1
  "${podman[@]}" volume rm -f "$volume" >/dev/null 2>&1
}
trap cleanup EXIT

tb=$(date +%s)
"${podman[@]}" build "${runopts[@]}" --pull=never --format docker -f docker/Dockerfile.cpu -t "$image" . >"$cache/build.log" 2>&1 ||
  { tail -40 "$cache/build.log"; fail "podman build docker/Dockerfile.cpu failed (log: $cache/build.log)"; }
say "built $image in $(($(date +%s) - tb)) s; size $("${podman[@]}" image inspect -f '{{.Size}}' "$image") bytes"

# No compiler in the final image; the service runs as non-root.
for c in gcc cc cmake make; do
  if "${podman[@]}" run "${runopts[@]}" --rm --entrypoint /bin/sh "$image" -c "command -v $c" >/dev/null 2>&1; then
    fail "the final image has $c"
  fi
done
uid="$("${podman[@]}" run "${runopts[@]}" --rm --entrypoint id "$image" -u)"
[ "$uid" != 0 ] || fail "the image runs as root"

"${podman[@]}" volume create "$volume" >/dev/null
start() {
  "${podman[@]}" run "${runopts[@]}" -d --name "$name" -p 127.0.0.1::5000 -v "$volume:/var/lib/kiln" \
    -e KILN_ADMIN_TOKEN="$token" "$image" >/dev/null || fail "podman run failed"
}
start
port="$("${podman[@]}" port "$name" 5000/tcp | head -1 | sed 's/.*://')"
[ -n "$port" ] || fail "no published port"
url="http://127.0.0.1:$port"
auth=(-H "Authorization: Bearer $token")

wait_healthz() {
  for _ in $(seq 1 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/healthz")" = 200 ] && return 0
    sleep 0.2
  done
  "${podman[@]}" logs "$name" | tail -20
  fail "/healthz never answered 200"
}
wait_healthz
body="$(curl -sf "$url/healthz")" || fail "/healthz"
say "/healthz: $body"

# The image's HEALTHCHECK, run now (podman's timer needs systemd) and its state.
"${podman[@]}" healthcheck run "$name" || fail "the HEALTHCHECK reports unhealthy"
health="$("${podman[@]}" inspect -f '{{.State.Health.Status}}' "$name" 2>/dev/null ||
          "${podman[@]}" inspect -f '{{.State.Healthcheck.Status}}' "$name")"
[ "$health" = healthy ] || fail "health state is '$health', not healthy"

# Sign-in applies (bound to 0.0.0.0 in the container); the token signs in.
code="$(curl -s -o /dev/null -w '%{http_code}' "$url/api/v1/jobs")"
[ "$code" = 401 ] || fail "GET /api/v1/jobs without a token: $code, not 401"
# (the log read whole first: under pipefail, grep -q ending early fails the pipe)
log="$("${podman[@]}" logs "$name" 2>&1)"
grep -q "added the admin admin" <<<"$log" || fail "no first admin in the log"
grep -qF "$token" <<<"$log" && fail "the log shows the given token"

datasets="$(curl -sf "${auth[@]}" "$url/api/v1/datasets")" || fail "GET /api/v1/datasets"
ds="$(node -e 'const d=JSON.parse(process.argv[1]);const l=d.datasets||d.items||d;const m=l.find(x=>x.name==="mnist");if(!m)process.exit(1);console.log(m.id)' "$datasets")" ||
  fail "the demo dataset mnist is not there: $datasets"
job="$(curl -sf "${auth[@]}" -H 'Content-Type: application/json' \
  -d "{\"dataset_id\": $ds, \"network\": \"lenet\", \"epochs\": 1, \"batch_size\": 64, \"name\": \"container-lenet\"}" \
  "$url/api/v1/jobs")" || fail "POST /api/v1/jobs"
jid="$(node -e 'console.log(JSON.parse(process.argv[1]).id)' "$job")"
tj=$(date +%s)
status=""
for _ in $(seq 1 600); do
  status="$(curl -sf "${auth[@]}" "$url/api/v1/jobs/$jid" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).status))')"
  case "$status" in done|failed|cancelled) break ;; esac
  sleep 0.5
done
[ "$status" = done ] || { "${podman[@]}" logs "$name" | tail -20; fail "job $jid ended '$status', not done"; }
say "LeNet job $jid: done in $(($(date +%s) - tj)) s"
curl -sf "${auth[@]}" -o "$cache/model.tar" "$url/api/v1/jobs/$jid/model" || fail "model download"
tar -tf "$cache/model.tar" >/dev/null 2>&1 || fail "the model download is not a tar archive"
[ "$(stat -c %s "$cache/model.tar")" -gt 1000 ] || fail "the model download is too small"
say "model: $(stat -c %s "$cache/model.tar") bytes, $(tar -tf "$cache/model.tar" | tr '\n' ' ')"

# Stop (SIGTERM to tini, forwarded to kiln serve) and start again: the volume keeps the job.
ts=$(date +%s)
"${podman[@]}" stop -t 20 "$name" >/dev/null || fail "podman stop"
stop_s=$(($(date +%s) - ts))
exit_code="$("${podman[@]}" inspect -f '{{.State.ExitCode}}' "$name")"
[ "$stop_s" -lt 15 ] || fail "stopping took ${stop_s} s: SIGTERM was not forwarded"
say "stopped in ${stop_s} s, exit code $exit_code"
"${podman[@]}" logs "$name" 2>&1 | tail -3
"${podman[@]}" start "$name" >/dev/null || fail "podman start"
port="$("${podman[@]}" port "$name" 5000/tcp | head -1 | sed 's/.*://')"
url="http://127.0.0.1:$port"
wait_healthz
after="$(curl -sf "${auth[@]}" "$url/api/v1/jobs/$jid")" || fail "job $jid is gone after the restart"
node -e 'const j=JSON.parse(process.argv[1]);if(j.status!=="done"||j.name!=="container-lenet")process.exit(1)' "$after" ||
  fail "job $jid after the restart: $after"
list="$(curl -sf "${auth[@]}" "$url/api/v1/jobs")" || fail "GET /api/v1/jobs after the restart"
grep -q "container-lenet" <<<"$list" || fail "the jobs list lacks the job after the restart"
log="$("${podman[@]}" logs "$name" 2>&1)"
[ "$(grep -c "added the admin" <<<"$log")" = 1 ] || fail "the first admin was added twice"
say "PASS in $(($(date +%s) - t0)) s"
