// The shape of the code, as issue-style measurements: files and lines per package, the largest files, the
// longest functions, and which package imports which. `npm run shape [-- <checkout>] [--json]`; generated
// code (gen/ folders, *.d.ts) and build output are left out, tests are counted (they are code we keep).
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import ts from 'typescript';

interface FunctionSize {
  file: string;
  line: number;
  name: string;
  lines: number;
}

const args = process.argv.slice(2);
const json = args.includes('--json');
const root = resolve(args.find((a) => !a.startsWith('--')) ?? '.');
const SKIP_DIRS = new Set(['node_modules', 'dist', 'gen', 'generated', '.turbo', 'coverage']);

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (!SKIP_DIRS.has(entry.name)) out.push(...sourceFiles(path));
    } else if (/\.(ts|tsx|mts)$/.test(entry.name) && !entry.name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

function functionName(node: ts.Node): string {
  if (
    (ts.isFunctionDeclaration(node) || ts.isMethodDeclaration(node) || ts.isFunctionExpression(node)) &&
    node.name
  )
    return node.name.getText();
  if (ts.isConstructorDeclaration(node)) return 'constructor';
  if (ts.isGetAccessor(node) || ts.isSetAccessor(node)) return node.name.getText();
  const parent = node.parent;
  if (parent && ts.isVariableDeclaration(parent)) return parent.name.getText();
  if (parent && ts.isPropertyAssignment(parent)) return parent.name.getText();
  if (parent && ts.isPropertyDeclaration(parent)) return parent.name.getText();
  if (parent && ts.isCallExpression(parent)) {
    const callee = parent.expression.getText();
    const first = parent.arguments[0];
    // Test blocks: it('…', () => …) reads better by its title.
    if (first && ts.isStringLiteralLike(first))
      return `${callee}(${JSON.stringify(first.text.slice(0, 50))})`;
    return `(callback of ${callee.slice(0, 40)})`;
  }
  return '(anonymous)';
}

const packagesDir = join(root, 'packages');
const packages = readdirSync(packagesDir).filter((p) => statSync(join(packagesDir, p)).isDirectory());
const perPackage: { package: string; files: number; lines: number }[] = [];
const files: { file: string; lines: number }[] = [];
const functions: FunctionSize[] = [];
const imports = new Map<string, Set<string>>();

for (const pkg of packages) {
  const src = join(packagesDir, pkg, 'src');
  let list: string[];
  try {
    list = sourceFiles(src);
  } catch {
    continue;
  }
  const name = (JSON.parse(readFileSync(join(packagesDir, pkg, 'package.json'), 'utf8')) as { name: string })
    .name;
  const uses = new Set<string>();
  let lines = 0;
  for (const path of list) {
    const text = readFileSync(path, 'utf8');
    const count = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
    lines += count;
    const file = relative(root, path);
    files.push({ file, lines: count });
    const sf = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
    const visit = (node: ts.Node): void => {
      if (
        (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) &&
        node.moduleSpecifier &&
        ts.isStringLiteral(node.moduleSpecifier)
      ) {
        const m = /^(@aenv\/[^/]+)/.exec(node.moduleSpecifier.text);
        if (m && m[1] !== name) uses.add(m[1]!);
      }
      if (ts.isFunctionLike(node) && 'body' in node && node.body) {
        const start = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line;
        const end = sf.getLineAndCharacterOfPosition(node.getEnd()).line;
        functions.push({ file, line: start + 1, name: functionName(node), lines: end - start + 1 });
      }
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }
  perPackage.push({ package: name, files: list.length, lines });
  imports.set(name, uses);
}

const isTest = (f: string) => /\.test\.ts$|\/testing\/|\/conformance\//.test(f);
files.sort((a, b) => b.lines - a.lines);
functions.sort((a, b) => b.lines - a.lines);
const report = {
  root,
  packages: perPackage,
  largestFiles: files.slice(0, 15),
  longestFunctions: functions.filter((f) => !isTest(f.file)).slice(0, 10),
  longestTestFunctions: functions.filter((f) => isTest(f.file)).slice(0, 5),
  imports: Object.fromEntries([...imports].map(([k, v]) => [k, [...v].sort()])),
};

if (json) {
  console.log(JSON.stringify(report, null, 2));
} else {
  console.log(`code shape of ${root}\n\npackage              files   lines`);
  for (const p of report.packages)
    console.log(`${p.package.padEnd(20)} ${String(p.files).padStart(5)} ${String(p.lines).padStart(7)}`);
  console.log('\nlargest files');
  for (const f of report.largestFiles) console.log(`${String(f.lines).padStart(6)}  ${f.file}`);
  console.log('\nlongest functions (tests and test helpers left out)');
  for (const f of report.longestFunctions)
    console.log(`${String(f.lines).padStart(6)}  ${f.name}  ${f.file}:${f.line}`);
  console.log('\nlongest test functions');
  for (const f of report.longestTestFunctions)
    console.log(`${String(f.lines).padStart(6)}  ${f.name}  ${f.file}:${f.line}`);
  console.log('\nimports between packages');
  for (const [k, v] of Object.entries(report.imports)) console.log(`${k} → ${v.join(', ') || '(none)'}`);
}
