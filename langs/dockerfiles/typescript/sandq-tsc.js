'use strict';
// sandq-tsc: TypeScript's compiler with the standard library declarations already parsed and
// bound, kept in a Node.js startup snapshot (node --build-snapshot). See typescript.Dockerfile.
//
//   node --snapshot-blob tsc.blob --build-snapshot sandq-tsc.js   (image build: makes tsc.blob)
//   node --snapshot-blob tsc.blob FILE.ts...                      (a job: type-checks, emits .js)
//
// Type errors are printed like `tsc --pretty false` (file(line,col): error TSnnnn: ...) and
// the exit status is 2 when there are any, as tsc's. Plain tsc in this image is the same
// compiler with the same options (see OPTIONS), only slower: it parses and binds some 55,000
// lines of declarations on every run.
const fs = require('fs');
const path = require('path');
const v8 = require('v8');

const TS = '/usr/share/nodejs/typescript/lib/typescript.js';
const TYPES = '/usr/share/nodejs/@types';

function loadTypeScript() {
  // The snapshot's entry script may only require built-in modules: evaluate TypeScript's one
  // self-contained file as CommonJS by hand.
  const vm = require('vm');
  const src = fs.readFileSync(TS, 'utf8');
  const wrapper = vm.runInThisContext(
    '(function (exports, require, module, __filename, __dirname) {' + src + '\n})', { filename: TS });
  const mod = { exports: {} };
  wrapper.call(mod.exports, mod.exports, require, mod, TS, path.dirname(TS));
  return mod.exports;
}

const ts = loadTypeScript();

const OPTIONS = {
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.CommonJS,
  moduleResolution: ts.ModuleResolutionKind.NodeJs,
  lib: ['lib.es2022.d.ts'],
  types: ['node'],
  typeRoots: [TYPES],
  esModuleInterop: true,
  resolveJsonModule: true,
  skipLibCheck: true,
  newLine: ts.NewLineKind.LineFeed,
};

// Source files of the declarations, parsed (and, once a checker has used them, bound) while the
// snapshot is built, then shared by every later program, as TypeScript's language service
// shares them between projects. Only files of the image are kept, never a job's.
const building = Boolean(v8.startupSnapshot && v8.startupSnapshot.isBuildingSnapshot());
const cache = new Map();
const cacheable = (f) => f.startsWith('/usr/');

function newHost() {
  const host = ts.createCompilerHost(OPTIONS);
  host.getCurrentDirectory = () => process.cwd();
  const read = host.getSourceFile;
  host.getSourceFile = (fileName, languageVersion, onError, shouldCreate) => {
    const hit = cacheable(fileName) && cache.get(fileName);
    if (hit) return hit;
    const sf = read(fileName, languageVersion, onError, shouldCreate);
    if (sf && building && cacheable(fileName)) cache.set(fileName, sf);
    return sf;
  };
  return host;
}

function compile(rootNames) {
  const host = newHost();
  const program = ts.createProgram({ rootNames, options: OPTIONS, host });
  let diags = ts.getPreEmitDiagnostics(program);
  const emitted = diags.some((d) => d.category === ts.DiagnosticCategory.Error) ? null : program.emit();
  if (emitted) diags = diags.concat(emitted.diagnostics);
  return { program, diags: ts.sortAndDeduplicateDiagnostics(diags) };
}

function main() {
  // The snapshot keeps the current directory of the image build in two caches: Node.js 18's
  // process.cwd() (chdir drops it) and ts.sys.getCurrentDirectory (memoized; see newHost).
  // TypeScript resolves imports ('./util', node_modules) against it: without both, every
  // import of another file failed with TS2307.
  process.chdir('.');
  // From a snapshot, argv[1] is the first argument (there is no script name).
  const files = process.argv.slice(1);
  if (files.length === 0) {
    process.stderr.write('usage: sandq-tsc FILE.ts...\n');
    process.exit(1);
  }
  // Each file is read once before anything else. The agent may have started this process ahead
  // of its job, on a FIFO where the job's first file will be (agent/prestart_fifo_linux.go): the
  // read waits there for the job. Nothing read is kept: the compiler reads the files again,
  // regular files by then, and reports what it cannot read.
  for (const f of files) {
    try { fs.readFileSync(f); } catch (e) { /* the compiler reports it */ }
  }
  const { diags } = compile(files);
  if (diags.length > 0) {
    const fmt = {
      getCanonicalFileName: (f) => f,
      getCurrentDirectory: () => process.cwd(),
      getNewLine: () => '\n',
    };
    process.stdout.write(ts.formatDiagnostics(diags, fmt));
  }
  process.exitCode = diags.some((d) => d.category === ts.DiagnosticCategory.Error) ? 2 : 0;
}

if (building) {
  // Warm: one compilation in a scratch dir fills the cache and compiles the checker's code.
  const dir = fs.mkdtempSync('/tmp/sandq-tsc-');
  const f = path.join(dir, 'warm.ts');
  fs.writeFileSync(f, [
    'import * as fs from "fs";',
    'import * as readline from "readline";',
    'const xs: number[] = [3, 1, 2].sort((a, b) => a - b);',
    'const m = new Map<string, number>(); m.set("a", 1);',
    'class P { constructor(public x: number) {} }',
    'console.log(xs, m, new P(1), fs.existsSync("/"), readline.createInterface, process.argv);',
    'const bad: number = "x";',
    '',
  ].join('\n'));
  const { diags } = compile([f]);
  if (diags.length !== 1) throw new Error('warm-up: expected one type error, got ' + diags.length);
  fs.rmSync(dir, { recursive: true });
  v8.startupSnapshot.setDeserializeMainFunction(main);
} else {
  main();
}
