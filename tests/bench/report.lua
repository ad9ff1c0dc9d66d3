-- wrk script for the runner (tests/bench/run), no pipelining: wrk keeps its
-- static request (no Lua call per request); done() prints one line of JSON
-- with the exact figures so nothing is parsed from wrk's rounded text.
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
