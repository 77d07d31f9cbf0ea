-- Mixed reads for wrk: GET of a job, a plan and a graph in turn (docs/benchmarks.md, "Load").
-- Usage: wrk -s get_mix.lua URL -- IDS_FILE ; IDS_FILE holds the key on its first line, then
-- one request path per line (/v1/jobs/..., /v1/plans/..., /v1/graphs/...).

local paths = {}
local key = nil
local n = 0

function init(args)
  local f = assert(io.open(args[1], "r"))
  key = f:read("*l")
  for line in f:lines() do
    if #line > 0 then paths[#paths + 1] = line end
  end
  f:close()
  n = math.random(#paths)
end

function request()
  n = n % #paths + 1
  return wrk.format("GET", paths[n], {["Authorization"] = "Bearer " .. key})
end

function done(summary, latency, requests)
  io.write(string.format(
    'WRK_RESULT {"requests": %d, "duration_us": %d, "non2xx": %d, "socket_errors": %d, ' ..
    '"timeouts": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write, summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
