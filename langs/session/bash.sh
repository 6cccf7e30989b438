# sandq's session driver for bash: runs each cell in this shell, so the
# current directory, variables, functions, aliases and exported environment
# carry over from cell to cell.
#
# Protocol (see package langs/session, doc.go): commands "<nonce> <nbytes>\n" +
# code on fd 3, one JSON reply line per cell on fd 4, and the cell-end marker
# on fd 1 and fd 2 before each reply.
#
# A cell is sourced from a here-string at the top level of this script (not
# in a function: `declare` makes globals, `return` ends the cell), with fds 3
# and 4 and our copies of fds 1 and 2 closed, so its commands never see them.
#
# Interrupts: SIGINT kills the cell's foreground commands (they are in our
# process group), and our INT trap starts an unwind: with extdebug on, a
# DEBUG trap that returns 2 makes bash return from the current function or
# sourced file, before each command, until the cell's source returns. So a
# pure-bash loop is interrupted too. Between cells SIGINT is ignored. A
# SIGINT can miss a foreground command (bash forking it when the signal
# lands), and bash runs our trap only when that command ends: the agent
# repeats SIGINT until the cell answers (Driver.InterruptEvery).
#
# `set -e` in a cell aborts the cell, not the session: our ERR trap (with
# errtrace) turns errexit off before bash would exit and unwinds the cell the
# same way; errexit is turned on again for the next cell. `set -x` is kept
# off while the driver's own commands run. An `exit`, or an error bash
# treats as fatal (an unset variable under `set -u`, ${var:?}), ends the
# session, as it would end a script.

BASH_ARGV0=bash
__sandq_count=0
__sandq_intr=
__sandq_fail=
__sandq_unwinding=
__sandq_errexit=
__sandq_xtrace=
__sandq_pid=$$

# The DEBUG trap while unwinding: return from the cell's functions and
# source, and stop at the driver's top level.
__sandq_unwind() {
	case ${FUNCNAME[1]-} in
	__sandq_*) return 0 ;; # our own trap handlers run to their end
	esac
	local f
	for f in "${FUNCNAME[@]:1}"; do
		if [[ $f == source ]]; then
			return 2
		fi
	done
	__sandq_stop_unwind
	return 0
}

__sandq_start_unwind() {
	if [[ -z $__sandq_unwinding ]]; then
		__sandq_unwinding=1
		shopt -s extdebug
		trap '__sandq_unwind' DEBUG
	fi
}

__sandq_stop_unwind() {
	if [[ -n $__sandq_unwinding ]]; then
		trap - DEBUG
		shopt -u extdebug
		__sandq_unwinding=
	fi
}

__sandq_on_int() {
	__sandq_intr=1
	__sandq_start_unwind
}

# The ERR trap: bash runs it before it exits for `set -e`, and exits only if
# errexit is still on after it. Subshells exit as they would.
__sandq_on_err() {
	local st=$?
	if [[ $- == *e* && $BASHPID == "$__sandq_pid" ]]; then
		set +e
		__sandq_errexit=1
		if [[ -z $__sandq_fail ]]; then
			__sandq_fail=$st
		fi
		__sandq_start_unwind
	fi
	return "$st"
}

exec {__sandq_out}>&1 {__sandq_err}>&2
trap '' INT
builtin printf '{"ready":true}\n' >&4

while IFS=' ' builtin read -r -u 3 __sandq_nonce __sandq_n; do
	__sandq_code=
	if ((__sandq_n > 0)); then
		LC_ALL=C IFS= builtin read -r -N "$__sandq_n" -u 3 __sandq_code || break
	fi
	__sandq_count=$((__sandq_count + 1))
	__sandq_intr= __sandq_fail=
	__sandq_prefix=
	if [[ -n $__sandq_errexit ]]; then __sandq_prefix+='set -e;'; fi
	if [[ -n $__sandq_xtrace ]]; then __sandq_prefix+='set -x;'; fi
	set -E
	trap '__sandq_on_err' ERR
	trap '__sandq_on_int' INT
	. /dev/stdin 3<&- 4>&- {__sandq_out}>&- {__sandq_err}>&- <<<"$__sandq_prefix$__sandq_code"
	{ __sandq_st=$? __sandq_flags=$-; set +ex; } 2>/dev/null
	trap '' INT
	trap - ERR
	__sandq_stop_unwind
	__sandq_errexit= __sandq_xtrace=
	if [[ $__sandq_flags == *e* || -n $__sandq_fail ]]; then __sandq_errexit=1; fi
	if [[ $__sandq_flags == *x* ]]; then __sandq_xtrace=1; fi

	if [[ -n $__sandq_intr ]]; then
		__sandq_error='{"name":"Interrupted","value":"interrupted by SIGINT"}'
	elif [[ -n $__sandq_fail ]]; then
		__sandq_error='{"name":"ExitStatus","value":"'$__sandq_fail'"}'
	elif ((__sandq_st != 0)); then
		__sandq_error='{"name":"ExitStatus","value":"'$__sandq_st'"}'
	else
		__sandq_error=
	fi
	builtin printf '\036sandq-cell-end:%s\036' "$__sandq_nonce" >&"$__sandq_out"
	builtin printf '\036sandq-cell-end:%s\036' "$__sandq_nonce" >&"$__sandq_err"
	if [[ -n $__sandq_error ]]; then
		builtin printf '{"nonce":"%s","status":"error","execution_count":%d,"error":%s}\n' \
			"$__sandq_nonce" "$__sandq_count" "$__sandq_error" >&4
	else
		builtin printf '{"nonce":"%s","status":"ok","execution_count":%d}\n' \
			"$__sandq_nonce" "$__sandq_count" >&4
	fi
done
exit 0
