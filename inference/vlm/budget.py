"""The global byte budget of the VLM step buffers, with per-project shares. No Django.

Redis is shared by every project, the inference queues and Celery; the per-client limit
(VLM_CLIENT_BUFFER_MAX_BYTES) alone let two tokens fill it. So every (project, deployment, client) that
buffers frames has an entry in one hash, `rs:vlm:budget`:

- `h|<entry>`: the bytes its buffers held after its last request (set from its exact per-stream sizes);
- `r|<entry>`: the bytes its requests in progress have reserved and not pushed yet.

A request reserves its frames' bytes in one Lua script (`budget_reserve`: atomic, so concurrent requests
cannot all pass the same check) that refuses when all buffers together would pass the global budget
(VLM_BUFFERS_MAX_BYTES) or the project's would pass its share (VLM_PROJECT_BUFFERS_MAX_BYTES). After the
push, `budget_settle` replaces the reservation by what the client's buffers really hold. An entry idle for
the buffers' TTL is dropped by the next reservation (its buffers have expired with it), so a web process
that dies mid-request leaks nothing for longer than that.
"""

from __future__ import annotations

import time

BUDGET_KEY = "rs:vlm:budget"
BUDGET_AT_KEY = "rs:vlm:budget:at"  # sorted set: entry -> when it was last used

OVER_GLOBAL = -1
OVER_PROJECT = -2

# KEYS: budget hash, last-use zset. ARGV: entry, project tag ("|p<id>|"), bytes, now, ttl, global max,
# project max. Returns {code, bytes held by all buffers (or by the project's, for OVER_PROJECT)}.
_RESERVE = """
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', tonumber(ARGV[4]) - tonumber(ARGV[5]))
for _, name in ipairs(stale) do
  redis.call('HDEL', KEYS[1], 'h|' .. name, 'r|' .. name)
  redis.call('ZREM', KEYS[2], name)
end
local incoming = tonumber(ARGV[3])
local total, project = 0, 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local n = tonumber(all[i + 1]) or 0
  if n > 0 then
    total = total + n
    if string.find(all[i], ARGV[2], 1, true) then project = project + n end
  end
end
if incoming > 0 then
  if total + incoming > tonumber(ARGV[6]) then return {-1, total} end
  if project + incoming > tonumber(ARGV[7]) then return {-2, project} end
  redis.call('HINCRBY', KEYS[1], 'r|' .. ARGV[1], incoming)
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[5])
return {1, total}
"""

# KEYS: the client's per-stream bytes hash, budget hash, last-use zset. ARGV: entry, reserved bytes, now.
# It may run at Redis' maxmemory (allow-oom): it writes a few bytes and gives a reservation back.
_SETTLE = """#!lua flags=allow-oom
local held = 0
for _, n in ipairs(redis.call('HVALS', KEYS[1])) do held = held + (tonumber(n) or 0) end
redis.call('HSET', KEYS[2], 'h|' .. ARGV[1], held)
if redis.call('HINCRBY', KEYS[2], 'r|' .. ARGV[1], -tonumber(ARGV[2])) <= 0 then
  redis.call('HDEL', KEYS[2], 'r|' .. ARGV[1])
end
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
return held
"""


def budget_entry(project_id: int | None, deployment: str, client: str) -> str:
    """The budget's name for one client's buffers on one deployment (its project first, so a project's share
    is the sum of the entries tagged `project_tag`)."""
    return f"{project_tag(project_id)}{deployment}:{client}"


def project_tag(project_id: int | None) -> str:
    return f"|p{project_id if project_id is not None else '-'}|"


def budget_reserve(
    pipe, entry: str, project_id: int | None, nbytes: int, *, ttl_s: int, max_bytes: int, project_max_bytes: int
) -> None:
    """Queue on `pipe` the atomic check-and-reserve of `nbytes` (its reply: `[code, held]`, code 1 when
    reserved, OVER_GLOBAL or OVER_PROJECT when refused)."""
    pipe.eval(
        _RESERVE,
        2,
        BUDGET_KEY,
        BUDGET_AT_KEY,
        entry,
        project_tag(project_id),
        int(nbytes),
        time.time(),
        int(ttl_s),
        int(max_bytes),
        int(project_max_bytes),
    )


def budget_settle(pipe, entry: str, bytes_key: str, reserved: int) -> None:
    """Queue on `pipe` the end of a request: the client's entry holds what its buffers hold now (the sum of
    `bytes_key`, its per-stream sizes), and the request's reservation is given back."""
    pipe.eval(_SETTLE, 3, bytes_key, BUDGET_KEY, BUDGET_AT_KEY, entry, int(reserved), time.time())
