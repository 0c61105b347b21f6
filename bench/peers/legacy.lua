-- SPDX-License-Identifier: MIT
-- legacy.lua - wrk script for the legacy routes (the original semaphore service's): cycles GET /semaphore/value/NAME,
-- POST /semaphore/down {name} and POST /semaphore/up {name}: the thread hands its connections
-- the next request of that cycle each time one is due, so each is one third of the load (the
-- semaphore is created beforehand with more room than connections, so no down is refused).
-- NAME is $SEMA_LEGACY_NAME (default "legacy").
local name = os.getenv("SEMA_LEGACY_NAME") or "legacy"
local body = '{"name":"' .. name .. '"}'
local json = { ["Content-Type"] = "application/json" }
local reqs = {}
local i = 0

-- Built in init, once wrk has set the Host header (Node's HTTP server refuses a request
-- without one).
function init(args)
    reqs = {
        wrk.format("GET", "/semaphore/value/" .. name),
        wrk.format("POST", "/semaphore/down", json, body),
        wrk.format("POST", "/semaphore/up", json, body),
    }
end

function request()
    i = i % #reqs + 1
    return reqs[i]
end
