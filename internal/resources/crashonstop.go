package resources

// crashOnStop is the main process of the server container of a MariaDB cluster of more than
// one instance (template generation 2 on, docs/design/0038): a POSIX sh script, run with the
// server's command line as its arguments, that starts the server as its child and turns the
// container's stop signal (SIGTERM, or SIGINT) into SIGKILL of the server. The server then
// crashes instead of shutting down cleanly: a clean shutdown commits the transactions that
// wait for a semi-sync acknowledgement no replica sent, and the instance comes back errant
// (docs/design/0035); a crash leaves them to be rolled back by --init-rpl-role=SLAVE at the
// next start (0011). It needs no binary of its own (the image's /bin/sh), nothing writable,
// and no privilege.
//
// Its exit status is the server's: its exit code, or 128+signal when a signal ended it (137
// after the stop). A second stop signal while the server dies changes nothing. When the server
// exits by itself the container exits with it and restarts like before.
//
// How: the trap sends SIGKILL and notes the stop; a trapped signal interrupts `wait` (POSIX),
// so after a stop the script waits again for the server's own status. A wait that finds the
// server already collected answers 127 (dash) or -1 (bash) and keeps the status collected
// before. When every wait was interrupted, or bash collected the server's status while a trap
// ran and lost it (its next wait answers -1), the status left is the interruption's (130,
// 143) or none: the server died of the SIGKILL the trap sent, so the script reports 137. $pid is set before the trap can use it,
// or the stop noted before the server started kills it at once. The script holds no "$(" (the
// kubelet expands $(VAR) in a container's command).
const crashOnStop = `pid= stop= stopped=
trap 'stop=1 stopped=1; [ -z "$pid" ] || kill -KILL "$pid" 2>/dev/null' TERM INT
"$@" &
pid=$!
[ -z "$stop" ] || kill -KILL "$pid"
wait "$pid"
status=$?
while [ -n "$stop" ]; do
  stop=
  wait "$pid"
  s=$?
  case $s in 127|-1) ;; *) status=$s ;; esac
done
if [ -n "$stopped" ]; then
  case $status in 127|-1|130|143) status=137 ;; esac
fi
exit "$status"
`

// crashOnStopGeneration2 is crashOnStop as template generation 2 runs it, frozen: under
// bash, a stop that interrupted the second wait could make it exit 255 (bash's wait answered
// -1 for the server whose status it had already collected).
const crashOnStopGeneration2 = `pid= stop=
trap 'stop=1; [ -z "$pid" ] || kill -KILL "$pid" 2>/dev/null' TERM INT
"$@" &
pid=$!
[ -z "$stop" ] || kill -KILL "$pid"
wait "$pid"
status=$?
while [ -n "$stop" ]; do
  stop=
  wait "$pid"
  s=$?
  [ "$s" -eq 127 ] || status=$s
done
exit "$status"
`
