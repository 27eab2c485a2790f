#!/bin/sh
# SPDX-License-Identifier: MIT
# A fleet on this machine, in one command: a Redis server, N pkv-servers
# sharing it as their KV store and publishing their KV events (with a
# replay socket each), and pkv-router in front of them, routing each
# request to the server whose cache holds its prompt's longest prefix.
#
#   sh examples/router/fleet.sh [--build DIR] [--model gemma3|smollm2]
#       [--servers N] [--port P] [--policy prefix|round-robin]
#       [-- pkv-server options...]
#
# The router listens on 127.0.0.1:P (default 8000), the servers on
# P+1..P+N (default 2 servers), Redis on P+100; the events and replay
# sockets are ipc:// endpoints in a directory of its own. --build is the
# CMake build directory (default build). Once all serve it prints one
# line per process ("fleet: server I pid PID http://... events ...
# replay ...", "fleet: router pid PID http://...", "fleet: router
# command ..."), then "fleet: ready", and runs until SIGINT or SIGTERM,
# when it stops every process it started. Each process's output goes to
# its log in that directory (printed with its path).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$here/../../build
model=gemma3
servers=2
port=8000
policy=prefix
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --policy) policy=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '3,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fleet.sh: unknown option $1 (--help)" >&2; exit 2 ;;
    esac
done
server_bin=$build/examples/pkv-server
router_bin=$build/examples/router/pkv-router
for b in "$server_bin" "$router_bin"; do
    [ -x "$b" ] || { echo "fleet.sh: no $b (build first, or --build DIR)" >&2
                     exit 2; }
done
command -v redis-server >/dev/null ||
    { echo "fleet.sh: no redis-server (tests/deps.sh installs it)" >&2
      exit 2; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/pkv-fleet.XXXXXX")
pids=""
stop() {
    trap - EXIT INT TERM
    for p in $pids; do kill "$p" 2>/dev/null; done
    for p in $pids; do wait "$p" 2>/dev/null; done
    rm -rf "$dir"
}
trap stop EXIT
trap 'exit 0' INT TERM

# wait_line LOG PID PATTERN: until LOG holds PATTERN (then print that
# line), or PID is gone or 300 s passed (then fail, printing the log).
wait_line() {
    tenths=0
    while ! grep -q "$3" "$1" 2>/dev/null; do
        if ! kill -0 "$2" 2>/dev/null || [ $tenths -ge 3000 ]; then
            echo "fleet.sh: $1:" >&2
            cat "$1" >&2
            exit 1
        fi
        sleep 0.1
        tenths=$((tenths + 1))
    done
}

redis_port=$((port + 100))
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" \
    --appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
pids="$pids $!"
wait_line "$dir/redis.log" $! "Ready to accept connections"
echo "fleet: redis pid $! 127.0.0.1:$redis_port"

backends=""
i=1
while [ $i -le "$servers" ]; do
    p=$((port + i))
    events=ipc://$dir/events-$i
    replay=ipc://$dir/replay-$i
    "$server_bin" --model "$model" --port "$p" --kv-events "$events" \
        --kv-events-replay "$replay" --store "127.0.0.1:$redis_port" "$@" \
        >"$dir/server-$i.log" 2>&1 &
    pid=$!
    pids="$pids $pid"
    wait_line "$dir/server-$i.log" $pid "listening on"
    echo "fleet: server $i pid $pid http://127.0.0.1:$p events $events" \
        "replay $replay log $dir/server-$i.log"
    backends="$backends --backend http://127.0.0.1:$p,$events,$replay"
    i=$((i + 1))
done

# shellcheck disable=SC2086 # backends is a list of words
set -- "$router_bin" --model "$model" --port "$port" --policy "$policy" \
    $backends
"$@" >"$dir/router.log" 2>&1 &
pid=$!
pids="$pids $pid"
wait_line "$dir/router.log" $pid "listening on"
echo "fleet: router pid $pid http://127.0.0.1:$port log $dir/router.log"
echo "fleet: router command $*"
echo "fleet: ready"
while :; do
    sleep 1 &
    wait $!
done
