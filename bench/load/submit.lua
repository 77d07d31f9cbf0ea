-- Job submissions for wrk: POST /v1/jobs with the body in BODY_FILE (docs/benchmarks.md, "Load").
-- Usage: wrk -s submit.lua URL -- BODY_FILE ; BODY_FILE holds the key on its first line, then the body.

local key = nil
local body = nil

function init(args)
  local f = assert(io.open(args[1], "r"))
  key = f:read("*l")
  body = f:read("*a")
  f:close()
end

function request()
  return wrk.format("POST", "/v1/jobs",
                    {["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json"}, body)
end

function done(summary, latency, requests)
  io.write(string.format(
    'WRK_RESULT {"requests": %d, "duration_us": %d, "non2xx": %d, "socket_errors": %d, ' ..
    '"timeouts": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write, summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
