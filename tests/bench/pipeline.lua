-- wrk script for the runner (tests/bench/run): HTTP pipelining, as
-- TechEmpower's plaintext load. `wrk ... -s pipeline.lua URL -- 16` sends 16
-- requests in one write; wrk counts each response. Latency is per batch.
-- done() prints one line of JSON with the exact figures (as report.lua).
local depth = 1

init = function(args)
  depth = tonumber(args[1]) or 1
  local r = {}
  for i = 1, depth do r[i] = wrk.format() end
  req = table.concat(r)
end

request = function()
  return req
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,' ..
    '"lat_mean_us":%.1f,"lat_p50_us":%d,"lat_p99_us":%d,"lat_max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(99), latency.max))
end
