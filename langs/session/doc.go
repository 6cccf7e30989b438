// Package session holds the drivers of stateful sessions: for each language
// that has one, a small program that the in-container agent starts once per
// session and feeds cells of code, which it runs in one persistent
// interpreter (variables, imports, functions, the current directory and the
// environment carry over from cell to cell), as a Jupyter kernel would.
//
// The drivers are embedded here, so the worker hands them to the agent with
// the session's start request and nothing has to be baked into the images.
//
// # Protocol
//
// The agent writes a driver's Files into Dir (root-owned, read-only to the
// job) and runs Argv as the job uid, as a session leader, with Env added to
// the image's environment, the work dir as its current directory, fd 0 on
// /dev/null, fd 1 and fd 2 on pipes, fd 3 the read end of the command pipe
// and fd 4 the write end of the reply pipe. The driver moves fds 3 and 4
// out of its cells' reach as far as its language can (below) and writes the
// line {"ready":true} on the reply pipe once it takes cells.
//
// A command is the line "<nonce> <nbytes>\n" (nonce: 16 characters of
// [A-Za-z0-9]) followed by exactly nbytes bytes of UTF-8 code. The driver
// runs the code, flushes its own output buffers, writes Marker(nonce) to
// fd 1 and then to fd 2, and then one Reply line (compact JSON, with the
// nonce) to the reply pipe. Everything the cell wrote before the markers is
// its output; what comes after them (a background process writing late)
// belongs to no cell.
//
// SIGINT to the driver's process group while a cell runs interrupts the
// cell: the driver lives on and replies with status "error". A SIGINT that
// arrives between cells, or just after a cell ended, is ignored and loses
// no command. End of input on fd 3 makes the driver exit with status 0. A
// cell that ends the interpreter (JavaScript's process.exit, R's quit,
// bash's exit) ends the session; Python's sys.exit is an error, as in
// IPython.
//
// # Languages
//
// python (python3 -u): IPython-like. The last statement of a cell, when it
// is an expression, is evaluated and displayed (not when the cell ends in
// ";"); display() shows more. A result is a MIME bundle: text/plain (repr)
// always, plus what the object offers (_repr_mimebundle_, _repr_html_,
// _repr_png_, ...: a pandas DataFrame is text/html too); a matplotlib
// figure is image/png, a plotly figure a self-contained text/html page.
// pyplot's show() and the figures still open at the end of a cell become
// image/png results; plotly's show() a text/html one. Top-level await
// works. Cells run as __main__ (pickling their classes works) with the work
// dir on sys.path. Tracebacks show the cells as "<cell N>" with their
// lines, never the driver. Interrupts raise KeyboardInterrupt wherever
// Python code runs (a long call into C, such as one big numpy operation,
// finishes first; os.system ignores SIGINT, as C's system() does, so only
// its child ends); the driver puts its SIGINT handler and the signal mask
// back after a cell that changed them. SIGURG does nothing: CPython loses
// a SIGINT that lands between its last check for signals and a blocking
// call (the handler is pending, the call sleeps on), so the agent repeats
// SIGURG to the driver until the cell answers, and the woken call runs
// the pending handler (Driver.InterruptNudge). fds 3 and 4 are
// close-on-exec from the start.
//
// javascript (node): cells are evaluated through the in-process inspector
// in V8's REPL mode, as a browser console does: let, const and class may be
// declared again, top-level await works, and the completion value is shown
// as text/plain with util.inspect (a promise is awaited first). require
// resolves from the work dir; dynamic import() does not work in cells.
// process.stdout and process.stderr write synchronously with write(2), so
// an interrupt cannot leave them stuck. SIGINT stops a cell's synchronous
// code (vm's breakOnSigint), and abandons a cell that awaits (what it
// started may still run); a busy loop after an await cannot be interrupted,
// and Node.js keeps a SIGINT that lands within microseconds of the end of
// a cell's synchronous code for the next cell, which it then interrupts at
// once (the agent's grace period covers the first case; the second is
// rare and costs one cell). fds 3 and 4 are reopened close-on-exec through
// /proc/self/fd when the job uid may open the pipes (see below); otherwise
// they stay open, and a cell's child processes inherit them.
//
// r (Rscript): each expression of a cell is evaluated in .GlobalEnv; visible
// values are printed as the console prints them, except the last
// expression's, which is the text/plain result (a ggplot prints, so it
// draws). Plots go to a PNG device (7x5 in at 120 dpi) opened on first use
// in each cell and closed after it: every page is an image/png result, in
// front of the value. Warnings print at once (warn = 1). Errors are named by
// the condition's class (simpleError, ...), with the calls of the cell as
// traceback; interrupts are named "interrupt" (during system(), as in the R
// console, SIGINT only ends the child: R ignores it there, and the cell
// goes on). Interrupts are suspended
// outside the cell's code, and one left pending is dropped before the next
// cell. The pipes are opened through /dev/fd when the job uid may; otherwise
// they are read and written through two cat relays that ignore SIGINT. R
// cannot make a descriptor close-on-exec: children inherit fds 3 and 4.
//
// bash: each cell is sourced at the top level of the driver's shell (so
// declare makes globals and return ends the cell), with fds 3 and 4 closed
// for its commands. A cell whose last command fails is an "ExitStatus"
// error with the status as value; set -e aborts the cell (not the session)
// at the failing command and stays on for the next cells. SIGINT kills the
// cell's foreground commands, and the driver unwinds the cell's functions
// and loops (extdebug's DEBUG trap), so a pure-bash loop stops too; a
// program that ignores SIGINT is waited for. Errors bash deems fatal in a
// script (an unset variable under set -u, ${v:?}) end the session, as
// exit does.
//
// # What the agent must do
//
//   - Start the driver with SIGINT not ignored: bash cannot trap a signal
//     that was ignored when it started (a Go parent that was itself started
//     with SIGINT ignored passes that on).
//   - Give both pipe ends it passes (fd 3's and fd 4's) to the job uid
//     (fchown) before it starts the driver: pipes made by root are mode
//     0600 root's, and only then can node and R reopen them through
//     /proc/self/fd (close-on-exec for node, without relay processes for R).
//     The drivers work either way.
//   - Allow for start-up. Measured to the ready line on the 2-core
//     development machine, from lightly to heavily loaded: python 30-190 ms,
//     javascript 60-150 ms (Node.js 20 on the host) and 400-900 ms (the
//     image's Node.js 18, loaded), r 150-300 ms and up to 1.5 s loaded,
//     bash under 10 ms (60 ms loaded). A start timeout of 10 s or more
//     leaves room.
package session
