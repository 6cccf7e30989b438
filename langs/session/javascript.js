// sandq's session driver for JavaScript (Node.js): a REPL over cells.
//
// Protocol (see package langs/session, doc.go): commands "<nonce> <nbytes>\n" +
// code on fd 3, one JSON reply line per cell on fd 4, and the cell-end
// marker on fd 1 and fd 2 before each reply.
//
// Cells are evaluated through the in-process inspector in V8's REPL mode
// (what Chrome's console uses): top-level let, const and class may be
// declared again in a later cell, top-level await works, and the cell's
// completion value comes back. The evaluation runs inside a vm script with
// breakOnSigint, so SIGINT stops the cell's synchronous code; a cell that
// is awaiting a promise is abandoned on SIGINT instead. Between cells the
// event loop runs (timers and promises a cell left go on) and SIGINT is
// ignored.
'use strict';

const { EventEmitter } = require('events');
const fs = require('fs');
const inspector = require('inspector');
const Module = require('module');
const net = require('net');
const path = require('path');
const util = require('util');
const vm = require('vm');

// fds 3 and 4 are reopened close-on-exec (libuv opens everything so) when
// the job uid may open the pipes; otherwise they are used as inherited.
function reopen(fd, flags) {
  try {
    const copy = fs.openSync('/proc/self/fd/' + fd, flags);
    fs.closeSync(fd);
    return copy;
  } catch {
    return fd;
  }
}
const cmdFd = reopen(3, fs.constants.O_RDONLY);
const replyFd = reopen(4, fs.constants.O_WRONLY);

const session = new inspector.Session();
session.connect();

// post runs an inspector method that answers synchronously.
function post(method, params) {
  let answer;
  session.post(method, params, (err, res) => {
    answer = { err, res };
  });
  if (!answer) throw new Error('sandq: inspector ' + method + ' did not answer');
  if (answer.err) throw answer.err;
  return answer.res;
}

// Values come back from the inspector as remote objects; receive() gets
// the real value by calling a function of ours with it.
const RECEIVE = Symbol.for('sandq.receive');
const EVALUATE = Symbol.for('sandq.evaluate');
let received;
Object.defineProperty(globalThis, RECEIVE, { value: (v) => { received = v; } });
const globalId = post('Runtime.evaluate', { expression: 'globalThis', objectGroup: 'sandq' }).result.objectId;

let held = false; // remote objects of the cell's group exist

function receive(remote) {
  if (remote === undefined) return undefined;
  if (!remote.objectId && !remote.unserializableValue && remote.type !== 'object') {
    return remote.value; // undefined, a boolean, number or string: no round trip
  }
  held = held || Boolean(remote.objectId);
  let arg;
  if (remote.objectId) arg = { objectId: remote.objectId };
  else if (remote.unserializableValue) arg = { unserializableValue: remote.unserializableValue };
  else arg = { value: remote.value };
  received = undefined;
  post('Runtime.callFunctionOn', {
    objectId: globalId,
    functionDeclaration: 'function (v) { globalThis[Symbol.for("sandq.receive")](v); }',
    arguments: [arg],
  });
  const v = received;
  received = undefined;
  return v;
}

// The evaluation is started from a vm script, so that SIGINT stops its
// synchronous part (breakOnSigint); its answer comes asynchronously.
let pending = null; // { expression, callback } for the next EVALUATE
Object.defineProperty(globalThis, EVALUATE, {
  value: () => {
    const { expression, callback } = pending;
    pending = null;
    session.post('Runtime.evaluate', {
      expression,
      replMode: true,
      awaitPromise: true,
      objectGroup: 'cell',
    }, callback);
  },
});
const starter = new vm.Script('globalThis[Symbol.for("sandq.evaluate")]()', { filename: 'sandq-start' });

globalThis.require = Module.createRequire(path.join(process.cwd(), '[cell]'));

function writeAll(fd, data, encoding) {
  const buf = typeof data === 'string' ? Buffer.from(data, encoding || 'utf8') : data;
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(fd, buf, off, buf.length - off);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1); // someone made the pipe non-blocking
    }
  }
}

// process.stdout and process.stderr (and so console) write synchronously
// with write(2), keeping no state: SIGINT may stop a cell anywhere, and a
// net.Socket stopped halfway through a write stays stuck, silencing every
// later cell. It also keeps fds 1 and 2 blocking for the cells' children
// (Node's own pipe streams make them non-blocking).
class SyncWriter extends EventEmitter {
  constructor(fd) {
    super();
    this.fd = fd;
    this._isStdio = true;
    this.isTTY = false;
    this.writable = true;
    this.writableLength = 0;
    this.writableHighWaterMark = 16384;
    this.writableCorked = 0;
    this._writableState = { errorEmitted: false, length: 0 }; // console looks
  }

  write(chunk, encoding, cb) {
    if (typeof encoding === 'function') {
      cb = encoding;
      encoding = undefined;
    }
    try {
      writeAll(this.fd, typeof chunk === 'string' ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength), encoding);
    } catch (e) {
      if (cb) process.nextTick(cb, e);
      else process.nextTick(() => this.emit('error', e));
      return false;
    }
    if (cb) process.nextTick(cb, null);
    return true;
  }

  end(chunk, encoding, cb) {
    if (typeof chunk === 'function') [cb, chunk] = [chunk, undefined];
    if (chunk !== undefined && chunk !== null) this.write(chunk, encoding);
    if (typeof cb === 'function') process.nextTick(cb, null);
    return this; // stdio stays open, as Node's does
  }

  cork() {}
  uncork() {}
  setDefaultEncoding() { return this; }
  destroy() { return this; }
  hasColors() { return false; }
  getColorDepth() { return 1; }
}
for (const [name, fd] of [['stdout', 1], ['stderr', 2]]) {
  Object.defineProperty(process, name, { configurable: true, enumerable: true, writable: true, value: new SyncWriter(fd) });
}

// Stack lines from the driver, the inspector or vm end the cell's frames.
function isDriverFrame(line) {
  return line.includes(__filename) || line.includes('(node:inspector') ||
    line.includes('sandq-start') || line.includes('(node:vm') || line.includes('at node:vm');
}

function describeError(e, details, code, filename) {
  try {
    return describe(e, details, code, filename);
  } catch {
    return { name: 'Error', value: '<a thrown value that cannot be described>', traceback: [] };
  }
}

function describe(e, details, code, filename) {
  const isError = e !== null && typeof e === 'object' && typeof e.stack === 'string';
  if (!isError) {
    return { name: 'Uncaught', value: util.inspect(e), traceback: ['Uncaught ' + util.inspect(e)] };
  }
  let name;
  let value;
  try {
    name = String(e.name || (e.constructor && e.constructor.name) || 'Error');
    value = String(e.message === undefined ? '' : e.message);
  } catch {
    name = 'Error';
    value = '';
  }
  const lines = [];
  for (const line of String(e.stack).split('\n')) {
    if (/^\s+at /.test(line) && isDriverFrame(line)) break;
    lines.push(line);
  }
  if (name === 'SyntaxError' && details && !lines.some((l) => l.includes(filename))) {
    const srcLines = code.split('\n');
    const row = Math.min(details.lineNumber || 0, srcLines.length - 1);
    const col = row === (details.lineNumber || 0) ? details.columnNumber || 0 : srcLines[row].length;
    lines.push('    at ' + filename + ':' + (row + 1) + ':' + (col + 1));
    lines.push('    ' + srcLines[row]);
    lines.push('    ' + ' '.repeat(col) + '^');
  }
  return { name, value, traceback: lines };
}

function isThenable(v) {
  try {
    return v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v.then === 'function';
  } catch {
    return false;
  }
}

let count = 0;
let current = null; // the running cell
const queue = [];

function finish(cell, error, value, hasValue) {
  if (cell.done) return;
  cell.done = true;
  if (current === cell) current = null;
  const reply = { nonce: cell.nonce, status: error ? 'error' : 'ok', execution_count: cell.count };
  try {
    if (!error && hasValue && value !== undefined) {
      reply.results = [{ 'text/plain': util.inspect(value) }];
    }
  } catch (e) {
    reply.status = 'error';
    error = describeError(e, null, cell.code, cell.filename);
  }
  if (error) reply.error = error;
  if (held) {
    held = false;
    try {
      post('Runtime.releaseObjectGroup', { objectGroup: 'cell' });
    } catch {
      // the objects are freed with the next release
    }
  }
  const marker = '\x1esandq-cell-end:' + cell.nonce + '\x1e';
  try { writeAll(1, marker); } catch { /* stdout closed */ }
  try { writeAll(2, marker); } catch { /* stderr closed */ }
  writeAll(replyFd, JSON.stringify(reply) + '\n');
  setImmediate(next);
}

function interrupted() {
  return { name: 'Interrupted', value: 'interrupted by SIGINT', traceback: [] };
}

function run(cell) {
  current = cell;
  pending = {
    expression: cell.code + '\n//# sourceURL=' + cell.filename,
    callback: (err, res) => {
      if (cell.done) return; // interrupted while it ran, answered late
      if (err) {
        finish(cell, { name: 'InternalError', value: String(err.message || err) });
        return;
      }
      if (res.exceptionDetails) {
        const e = receive(res.exceptionDetails.exception);
        finish(cell, describeError(e, res.exceptionDetails, cell.code, cell.filename));
        return;
      }
      const value = receive(res.result);
      if (!isThenable(value)) {
        finish(cell, null, value, true);
        return;
      }
      Promise.resolve(value).then(
        (v) => finish(cell, null, v, true),
        (e) => finish(cell, describeError(e, null, cell.code, cell.filename)),
      );
    },
  };
  try {
    starter.runInThisContext({ breakOnSigint: true, displayErrors: false });
  } catch (e) {
    pending = null;
    if (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') finish(cell, interrupted());
    else finish(cell, describeError(e, null, cell.code, cell.filename));
  }
}

function next() {
  if (current || queue.length === 0) return;
  const { nonce, code } = queue.shift();
  count++;
  run({ nonce, code, count, filename: 'cell-' + count, done: false });
}

// SIGINT between cells is ignored; during a cell's synchronous code the
// vm watchdog takes it; here it abandons a cell that awaits.
process.on('SIGINT', () => {
  if (current) finish(current, interrupted());
});
// What a cell leaves behind must not end the session (Node.js would exit).
process.on('uncaughtException', (e) => {
  try { process.stderr.write('Uncaught ' + util.inspect(e) + '\n'); } catch { /* ignore */ }
});
process.on('unhandledRejection', (e) => {
  try { process.stderr.write('Uncaught (in promise) ' + util.inspect(e) + '\n'); } catch { /* ignore */ }
});

let buf = Buffer.alloc(0);
function parse() {
  for (;;) {
    const nl = buf.indexOf(10);
    if (nl < 0) return;
    const [nonce, size] = buf.subarray(0, nl).toString('latin1').split(' ');
    const n = Number(size);
    if (buf.length < nl + 1 + n) return;
    queue.push({ nonce, code: buf.subarray(nl + 1, nl + 1 + n).toString('utf8') });
    buf = buf.subarray(nl + 1 + n);
  }
}

const input = new net.Socket({ fd: cmdFd, readable: true, writable: false });
input.on('data', (chunk) => {
  buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
  parse();
  // After this I/O phase: a SIGINT that came with the command is handled
  // first, as one sent between cells.
  setImmediate(next);
});
input.on('end', () => process.exit(0));
input.on('error', () => process.exit(0));

writeAll(replyFd, '{"ready":true}\n');
