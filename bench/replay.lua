-- wrk script: replay recorded extender requests, closed loop or at a fixed rate (wrk2-style pacing).
--
-- Driven by bench/loadtest.py through environment variables:
--   REPLAY_BODIES   file with one request per line: "<path>\t<json body>" (e.g. "/filter\t{...}"), or
--                   "<due us>\t<path>\t<json body>" for a timed replay
--   REPLAY_THREADS  the -t given to wrk; run with -c equal to -t (one connection per thread)
--   REPLAY_RATE     total requests per second over all threads; 0 = closed loop (as fast as replies come);
--                   -S = one pass at the recorded times (the due column), S times faster
--   REPLAY_OUT      where done() writes the raw samples (JSON)
--
-- Thread i sends requests i, i+T, i+2T, ... of the file, cycling, so the threads together keep the
-- recorded order. At a fixed rate each connection has a schedule fixed in advance: request k is due
-- at start + k * T / RATE. A reply that comes back late delays the next send on that connection; the
-- latency recorded for a request is then counted from the moment it was due, not from when it could
-- be sent (the correction for coordinated omission that wrk2 makes). Timer slop of the client itself
-- (wrk's delay() has 1 ms resolution) is not counted: latency = reply - send + max(0, previous reply -
-- due), i.e. service time plus the time the request had to wait behind late replies.
local ffi = require("ffi")
ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } replay_timespec;
  int clock_gettime(int clk_id, replay_timespec *tp);
]]
local ts = ffi.new("replay_timespec")
local function now_us()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1000000 + tonumber(ts.tv_nsec) / 1000
end

local threads = {}
local counter = 0

function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

local requests = {}
local paths = {}
local dues = {}      -- timed replay: microseconds after the first request at which each one is due
local n = 0
local T = 1
local timed = false  -- REPLAY_RATE < 0: the recorded times, -REPLAY_RATE times faster
local interval_us = 0
local seq = 0        -- requests sent so far on this connection
local start_us = nil
local sent_us, prev_reply_us = nil, nil
local last_index = 0
lat = {}      -- corrected latency per reply, microseconds (read by done() through thread:get)
service = {}  -- reply - send, microseconds
kind = {}     -- index into the file of each reply's request (0-based)
errors = 0
first_error = ""

function init(args)
  T = tonumber(os.getenv("REPLAY_THREADS") or "1")
  local rate = tonumber(os.getenv("REPLAY_RATE") or "0")
  timed = rate < 0
  local file = assert(io.open(assert(os.getenv("REPLAY_BODIES"), "REPLAY_BODIES is not set"), "r"))
  local headers = { ["Content-Type"] = "application/json", ["Accept"] = "application/json" }
  local index = 0
  for line in file:lines() do
    if index % T == tid then
      local rest = line
      n = n + 1
      if timed then
        local tab = rest:find("\t", 1, true)
        dues[n] = tonumber(rest:sub(1, tab - 1))
        rest = rest:sub(tab + 1)
      end
      local tab = rest:find("\t", 1, true)
      requests[n] = wrk.format("POST", rest:sub(1, tab - 1), headers, rest:sub(tab + 1))
      paths[n] = index
    end
    index = index + 1
  end
  file:close()
  assert(n > 0, "thread " .. tid .. " got no request: fewer lines than threads?")
  if rate > 0 then
    interval_us = 1000000 * T / rate
  end
end

local paced = function()
  return timed or interval_us > 0
end

local function due(k)
  if timed then
    return start_us + dues[k]
  end
  return start_us + (k - 1) * interval_us
end

local function ensure_start(now)
  if start_us == nil then
    -- rate mode: spread the connections' first sends over one interval, so they do not fire at once
    start_us = timed and now or now + interval_us * tid / T
  end
end

function delay()
  if not paced() then
    return 0
  end
  local now = now_us()
  ensure_start(now)
  if timed and seq >= n then
    return 3600000 -- one pass only: idle until wrk's duration ends
  end
  local wait = due(seq + 1) - now
  if wait <= 0 then
    return 0
  end
  return math.ceil(wait / 1000)
end

function request()
  seq = seq + 1
  local j = (seq - 1) % n + 1
  last_index = paths[j]
  sent_us = now_us()
  ensure_start(sent_us)
  return requests[j]
end

function response(status, headers, body)
  local now = now_us()
  local waited = 0
  if paced() and prev_reply_us ~= nil and prev_reply_us > due(seq) then
    waited = prev_reply_us - due(seq)
  end
  local k = #lat + 1
  service[k] = now - sent_us
  lat[k] = now - sent_us + waited
  kind[k] = last_index
  if status ~= 200 or (body:sub(1, 1) == "{" and not body:find('"Error":""', 1, true)) then
    errors = errors + 1
    if first_error == "" then
      first_error = "HTTP " .. status .. ": " .. body:sub(1, 300)
    end
  end
  prev_reply_us = now
end

local function join(t)
  local parts = {}
  for k = 1, #t do
    parts[k] = string.format("%.1f", t[k])
  end
  return "[" .. table.concat(parts, ",") .. "]"
end

function done(summary, latency, requests)
  local out = assert(io.open(assert(os.getenv("REPLAY_OUT"), "REPLAY_OUT is not set"), "w"))
  local e = summary.errors
  out:write(string.format(
    '{"duration_us":%d,"requests":%d,"bytes":%d,"socket_errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d},'
      .. '"non_2xx":%d,"wrk_latency_us":{"p50":%.1f,"p90":%.1f,"p99":%.1f,"max":%.1f},"threads":[',
    summary.duration, summary.requests, summary.bytes, e.connect, e.read, e.write, e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
  for t, thread in ipairs(threads) do
    if t > 1 then
      out:write(",")
    end
    local fe = (thread:get("first_error") or ""):gsub('[%c"\\]', function(c)
      return string.format("\\u%04x", c:byte())
    end)
    out:write(string.format('{"errors":%d,"first_error":"%s","lat":%s,"service":%s,"index":%s}',
      thread:get("errors"), fe, join(thread:get("lat")), join(thread:get("service")), join(thread:get("kind"))))
  end
  out:write("]}\n")
  out:close()
end
