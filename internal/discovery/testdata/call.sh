#!/bin/sh
# The call command of the discovery tests: what a call does depends on the
# tool's name, its last argument. It runs in the workspace, where the
# tests find the process ids it writes.
case "$1" in
echo) cat ;;                                    # the arguments, back
empty) cat >/dev/null ;;                        # success, no output
lines) printf 'one\ntwo\n' ;;
fail) printf 'partial'; printf 'boom' >&2; exit 3 ;;
warn) printf 'ok'; printf 'careful' >&2 ;;      # exit 0, but stderr
silent_fail) exit 7 ;;
signal) printf 'before'; kill -KILL $$ ;;
big) head -c 300000 /dev/zero | tr '\0' x ;;
env) env | sort ;;
steal) cat "$(cat target)" ;;                    # the file the workspace's "target" names
stdin_size) wc -c | tr -d ' \n' ;;
noread) head -c 100 >/dev/null ;;               # leaves most of a long stdin unread
ignore_term) trap '' TERM; echo $$ > term.pid; while :; do sleep 1; done ;;
hang)
	# A child, one that leaves the session, and one whose parent exits
	# (re-parented): all must end with the call.
	sleep 1000 & echo $! > child.pid
	setsid sh -c 'echo $$ > setsid.pid; exec sleep 1000' >/dev/null 2>&1 &
	( sh -c 'echo $$ > orphan.pid; exec sleep 1000' >/dev/null 2>&1 & )
	while [ ! -s setsid.pid ] || [ ! -s orphan.pid ]; do sleep 0.01; done
	echo started > started
	wait ;;
leave)
	# Exits at once, leaving behind a process that left the session, whose
	# parent is gone, that ignores SIGTERM and holds stdout open: it must
	# end with the call.
	( setsid sh -c 'trap "" TERM; echo $$ > left.pid; exec sleep 1000' & )
	while [ ! -s left.pid ]; do sleep 0.01; done
	printf 'done' ;;
*) printf 'no tool %s' "$1" >&2; exit 2 ;;
esac
