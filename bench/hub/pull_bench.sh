#!/usr/bin/env bash
# The 10 GB figure of issue 40 (not a CI test): a full-size synthetic google/gemma-4-E2B-it
# repository (bf16, hub layout, 3 shards, ~10 GB of random weights) served by the loopback fake Hub
# (build/src/hub/fake_hub_serve), pulled into a fresh HF_HOME, then pulled again into another
# fresh HF_HOME, killed at ~50% and resumed.
#
#   nice -n 10 bash bench/hub/pull_bench.sh      # from the repository root, after a build
#
# Reports: the pull's MB/s (and with the final sync), the disk's own write rate (dd, fdatasync),
# curl's rate for the same files from the same server, interleaved with the pulls (to /dev/null,
# and to files on the same disk: what a plain downloader gets here at the same moment),
# the pull's CPU time and the SHA-256 share of it (OpenSSL's rate on this CPU, measured here), the
# bytes on disk at the kill, the bytes the resume transferred (counted by the client and by the
# server) against what was missing, and a coreutils sha256sum of every resumed blob against its name.
# Environment: BUILD (build), WORK (/tmp/gemma-hub-bench; ~30 GB free needed), KILL_SIGNAL (KILL
# or INT), ROUNDS (2 curl/pull pairs), KEEP=1 keeps WORK, PRESET (e2b-bf16; a small one for a trial run).
# Needs 2x the repository on disk at once (the repository and one cache), and the curl, openssl
# and GNU time (/usr/bin/time) commands.
set -euo pipefail

BUILD=${BUILD:-build}
WORK=${WORK:-/tmp/gemma-hub-bench}
KILL_SIGNAL=${KILL_SIGNAL:-KILL}
BIN=$(realpath "$BUILD/tools/gemma-engine")
HUB=$(realpath "$BUILD/src/hub/fake_hub_serve")
REPO_ID=google/gemma-4-E2B-it
[ -x "$BIN" ] && [ -x "$HUB" ] || { echo "build gemma-engine and fake_hub_serve first" >&2; exit 2; }

mkdir -p "$WORK"
SERVER_PID=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

log() { printf '%s\n' "$*" | tee -a "$WORK/report.txt"; }
bytes_in() { find "$1" -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'; }
# Dirty pages of the step before (synth's 10 GB above all) written back before a timed step, so
# the kernel's writeback does not compete with it for the disk.
quiesce() { sync; sleep 2; }
mbps() { awk -v b="$1" -v s="$2" 'BEGIN {printf "%.0f", b / s / 1e6}'; }
# Asks the server for the bytes it served since the last request (and resets its count).
served() {
  local before
  before=$(grep -c 'served [0-9]* bytes$' "$WORK/server.log" || true)
  kill -USR1 "$SERVER_PID"
  for _ in $(seq 100); do
    [ "$(grep -c 'served [0-9]* bytes$' "$WORK/server.log" || true)" -gt "$before" ] && break
    sleep 0.05
  done
  grep 'served [0-9]* bytes$' "$WORK/server.log" | tail -1 | awk '{print $3}'
}

: > "$WORK/report.txt"
log "# pull bench: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
log "load average at start: $(cut -d" " -f1-3 /proc/loadavg) (2 cores shared with other engineers)"
log "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(free -g | awk '/Mem:/ {print $2}') GiB RAM, nice $(nice)"

# 1. The repository.
REPO=$WORK/repo
/usr/bin/time -f '%e' -o "$WORK/t_synth" "$BIN" synth --preset "${PRESET:-e2b-bf16}" --layout hub --shards 3 \
  --out "$REPO" > /dev/null
TOTAL=$(bytes_in "$REPO")
log "repository: $(ls "$REPO" | tr '\n' ' ')"
log "repository bytes: $TOTAL (synthesized in $(cat "$WORK/t_synth") s)"

# 2. The disk's own sequential write rate (4 GiB, flushed), for comparison.
quiesce
/usr/bin/time -f '%e' -o "$WORK/t_dd" dd if=/dev/zero of="$WORK/dd.bin" bs=4M count=1024 \
  conv=fdatasync status=none
log "disk write (dd 4 GiB, conv=fdatasync): $(mbps $((4 << 30)) "$(cat "$WORK/t_dd")") MB/s"
rm -f "$WORK/dd.bin"

# 3. The fake Hub (hashes every file once at start).
"$HUB" "$REPO" "$REPO_ID" > "$WORK/endpoint" 2> "$WORK/server.log" &
SERVER_PID=$!
for _ in $(seq 1200); do [ -s "$WORK/endpoint" ] && break; sleep 0.5; done
ENDPOINT=$(head -1 "$WORK/endpoint")
log "$(grep 'oids hashed' "$WORK/server.log")"
served > /dev/null

# 4. Pulls into a fresh HF_HOME, each after curl fetching the same files from the same server into
# a fresh directory (a plain downloader on the same disk, the same moment: this shared machine's
# rate varies by tens of percent from one minute to the next). ROUNDS pairs; the last pull's cache
# stays for the SHA-256 step. First the server and loopback alone: curl into /dev/null.
COMMIT=c0ffee0000000000000000000000000000000001
FILES=$(cd "$REPO" && ls)
curl_all() {  # DIR: every file, one curl each; DIR /dev/null: discarded
  for f in $FILES; do
    if [ "$1" = /dev/null ]; then out=/dev/null; else out="$1/$f"; fi
    curl -sfL -o "$out" "$ENDPOINT/$REPO_ID/resolve/$COMMIT/$f"
  done
}
export -f curl_all
export FILES ENDPOINT REPO_ID COMMIT
quiesce
/usr/bin/time -f '%e %U %S' -o "$WORK/t_curl0" bash -c 'curl_all /dev/null'
read -r C0_WALL C0_USER C0_SYS < "$WORK/t_curl0"
served > /dev/null
log "curl of every file to /dev/null (server + loopback only): $(mbps "$TOTAL" "$C0_WALL") MB/s (curl CPU $C0_USER + $C0_SYS s)"
H1=$WORK/home1
for round in $(seq "${ROUNDS:-2}"); do
  rm -rf "$H1" "$WORK/curl"
  mkdir -p "$WORK/curl"
  quiesce
  /usr/bin/time -f '%e %U %S' -o "$WORK/t_curl1" bash -c "curl_all $WORK/curl"
  read -r C1_WALL C1_USER C1_SYS < "$WORK/t_curl1"
  /usr/bin/time -f '%e' -o "$WORK/t_csync" sync
  served > /dev/null
  rm -rf "$WORK/curl"
  quiesce
  /usr/bin/time -f '%e %U %S' -o "$WORK/t_pull1" env -u HF_HUB_CACHE -u HF_TOKEN -u HF_HUB_OFFLINE \
    HF_HOME="$H1" HF_ENDPOINT="$ENDPOINT" "$BIN" pull "$REPO_ID" > /dev/null 2> "$WORK/pull1.log"
  /usr/bin/time -f '%e' -o "$WORK/t_sync1" sync
  read -r WALL1 USER1 SYS1 < "$WORK/t_pull1"
  SERVED1=$(served)
  GOT1=$(bytes_in "$H1/hub/models--google--gemma-4-E2B-it/blobs")
  log "round $round: curl of every file to files: $(mbps "$TOTAL" "$C1_WALL") MB/s ($C1_WALL s; $(mbps "$TOTAL" "$(awk -v a="$C1_WALL" -v b="$(cat "$WORK/t_csync")" 'BEGIN {print a + b}')") MB/s with the sync after it; CPU $C1_USER + $C1_SYS s)"
  log "round $round: $(tail -1 "$WORK/pull1.log")"
  log "round $round: pull: $GOT1 bytes in the cache, $SERVED1 served; $(mbps "$GOT1" "$WALL1") MB/s ($WALL1 s; $(mbps "$GOT1" "$(awk -v a="$WALL1" -v b="$(cat "$WORK/t_sync1")" 'BEGIN {print a + b}')") MB/s with the sync after it); CPU user $USER1 s + sys $SYS1 s"
done

# 5. SHA-256's cost: OpenSSL (the client's library) over the largest blob, from the page cache.
BIG=$(find "$H1/hub/models--google--gemma-4-E2B-it/blobs" -type f -printf '%s %p\n' | sort -n | tail -1 | cut -d' ' -f2)
cat "$BIG" > /dev/null
/usr/bin/time -f '%e %U %S' -o "$WORK/t_sha" openssl dgst -sha256 "$BIG" > /dev/null
read -r SHA_WALL SHA_USER SHA_SYS < "$WORK/t_sha"
SHA_RATE=$(awk -v b="$(stat -c %s "$BIG")" -v u="$SHA_USER" 'BEGIN {printf "%.0f", b / u / 1e6}')
SHA_CPU=$(awk -v b="$GOT1" -v r="$SHA_RATE" 'BEGIN {printf "%.1f", b / (r * 1e6)}')
log "SHA-256 (openssl dgst, one core): $SHA_RATE MB/s of CPU; the pull's $GOT1 bytes = $SHA_CPU CPU s = $(awk -v a="$SHA_CPU" -v u="$USER1" -v s="$SYS1" 'BEGIN {printf "%.0f", 100 * a / (u + s)}')% of the last pull's CPU time, $(awk -v a="$SHA_CPU" -v w="$WALL1" 'BEGIN {printf "%.0f", 100 * a / w}')% of its wall time (on its own thread)"
rm -rf "$H1"

# 6. A further pull into a fresh HF_HOME, killed at ~50%, then resumed.
quiesce
H2=$WORK/home2
BLOBS=$H2/hub/models--google--gemma-4-E2B-it/blobs
env -u HF_HUB_CACHE -u HF_TOKEN -u HF_HUB_OFFLINE HF_HOME="$H2" HF_ENDPOINT="$ENDPOINT" "$BIN" pull "$REPO_ID" \
  > /dev/null 2> "$WORK/pull2.log" &
PULL_PID=$!
HALF=$((TOTAL / 2))
while kill -0 "$PULL_PID" 2>/dev/null; do
  [ "$(bytes_in "$BLOBS")" -ge "$HALF" ] && break
  sleep 0.05
done
kill -"$KILL_SIGNAL" "$PULL_PID" 2>/dev/null || true
wait "$PULL_PID" 2>/dev/null || true
AT_KILL=$(bytes_in "$BLOBS")
SERVED_BEFORE=$(served)
log "pull 2: SIG$KILL_SIGNAL at $AT_KILL bytes on disk ($(awk -v a="$AT_KILL" -v t="$TOTAL" 'BEGIN {printf "%.1f", 100 * a / t}')%); blobs then: $(ls "$BLOBS" | sed 's/^\(........\)[0-9a-f]*/\1…/' | tr '\n' ' ')"
/usr/bin/time -f '%e %U %S' -o "$WORK/t_resume" env -u HF_HUB_CACHE -u HF_TOKEN -u HF_HUB_OFFLINE HF_HOME="$H2" \
  HF_ENDPOINT="$ENDPOINT" "$BIN" pull "$REPO_ID" > /dev/null 2> "$WORK/resume.log"
read -r WALL3 USER3 SYS3 < "$WORK/t_resume"
SERVED_RESUME=$(served)
FINAL=$(bytes_in "$BLOBS")
log "resume: $(tail -1 "$WORK/resume.log")"
log "resume: served $SERVED_RESUME bytes; missing at the kill $((FINAL - AT_KILL)); ratio $(awk -v a="$SERVED_RESUME" -v m="$((FINAL - AT_KILL))" 'BEGIN {printf "%.4f", a / m}'); before the kill the server had sent $SERVED_BEFORE; wall $WALL3 s, CPU user $USER3 s + sys $SYS3 s"

# 7. Every resumed blob against its name (the LFS sha256 or git sha1), with coreutils.
BAD=0
for f in "$BLOBS"/*; do
  name=$(basename "$f")
  if [ ${#name} -eq 64 ]; then
    [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$name" ] || { log "MISMATCH $name"; BAD=1; }
  fi
done
log "resumed blobs' sha256sum = their names: $([ $BAD = 0 ] && echo yes || echo NO)"
log "snapshot: $(ls "$H2/hub/models--google--gemma-4-E2B-it/snapshots/"*/ | tr '\n' ' ')"
log "load average at the end: $(cut -d" " -f1-3 /proc/loadavg)"
cp "$WORK/report.txt" "${REPORT:-/tmp/gemma-hub-bench-report.txt}"
exit $BAD
