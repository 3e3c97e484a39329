#!/usr/bin/env sysbench
-- Debian's oltp_read_write with a reconnect that works.
--
-- sysbench 1.0.20 reconnects a lost connection by calling mysql_real_connect on the MYSQL
-- handle it has just closed with mysql_close. With libmariadb, Debian's client library, that
-- never succeeds (akopytov/sysbench#527, fix proposed in #528): after one lost connection a
-- thread retries every millisecond forever, even against a healthy server (measured in
-- docs/design/0017). This script keeps the stock workload (it loads oltp_read_write.lua
-- unchanged) and replaces only the reconnect: a lost connection is closed and a new one made
-- with a fresh handle (drv:connect), every 10 ms until it succeeds, and the statements are
-- prepared again on it.
--
-- Run it with --mysql-ignore-errors=1213,1205,1020 (sysbench's default list), not "all": the
-- driver must report lost connections to this script instead of trying its own reconnect.
-- Every other error restarts the transaction, as "all" does.

require("oltp_read_write")

local ffi = require("ffi")
ffi.cdef [[int usleep(unsigned int usec);]]

-- Client errors that mean the connection is gone (CR_CONNECTION_ERROR, CR_CONN_HOST_ERROR,
-- CR_SERVER_GONE_ERROR, CR_TCP_CONNECTION, CR_SERVER_LOST, CR_SERVER_LOST_EXTENDED), the
-- server's ER_CONNECTION_KILLED, and ER_NEW_ABORTING_CONNECTION: a login the server refused
-- and closed (a former primary refusing application logins for a moment after a promotion).
local lost = { [2002] = true, [2003] = true, [2006] = true, [2011] = true, [2013] = true,
               [2055] = true, [1927] = true, [1184] = true }

-- forget_statements closes the prepared statements and empties their tables (as thread_init
-- made them), so that none is closed twice when preparing fails part way.
local function forget_statements()
   pcall(close_statements)
   stmt = {}
   param = {}
   for t = 1, sysbench.opt.tables do
      stmt[t] = {}
      param[t] = {}
   end
end

-- reconnect replaces the connection until a new one is made and the statements are prepared
-- on it: the new connection can be lost too (the endpoint moved again, a server fenced).
local function reconnect()
   while true do
      forget_statements()
      pcall(function() con:disconnect() end)
      local ok, c = pcall(drv.connect, drv)
      if ok then
         con = c
         if pcall(prepare_statements) then
            return
         end
      end
      ffi.C.usleep(10000)
   end
end

-- A lost connection is replaced; every other error restarts the transaction.
function sysbench.hooks.sql_error_ignorable(err)
   if lost[err.sql_errno] then
      reconnect()
   end
   return true
end

-- The statements were prepared again by reconnect; nothing more to do before the retry.
function sysbench.hooks.before_restart_event(err)
end
