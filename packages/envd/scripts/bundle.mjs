// Bundles envd into one CommonJS file (dist/envd.cjs) for the tools dir. node-pty stays external: its
// JS and native module are copied next to the bundle by ensureToolsDir.
//   node scripts/bundle.mjs [--out <file>]
import { build } from 'esbuild';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkgRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outIndex = process.argv.indexOf('--out');
const outfile = outIndex > 0 ? resolve(process.argv[outIndex + 1]) : join(pkgRoot, 'dist', 'envd.cjs');
const require = createRequire(join(pkgRoot, 'package.json'));

// The protocol package and envd each have a copy of @bufbuild/protobuf: bundle exactly one (envd's).
const singleProtobuf = {
  name: 'single-protobuf',
  setup(b) {
    b.onResolve({ filter: /^@bufbuild\/protobuf(\/.*)?$/ }, (args) => ({ path: require.resolve(args.path) }));
    b.onResolve({ filter: /^@aenv\/protocol$/ }, () => ({
      path: join(pkgRoot, '..', 'protocol', 'src', 'index.ts'),
    }));
  },
};

await build({
  entryPoints: [join(pkgRoot, 'src', 'main.ts')],
  outfile,
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  minify: true,
  keepNames: false,
  legalComments: 'none',
  external: ['node-pty'],
  plugins: [singleProtobuf],
  logLevel: 'warning',
  logOverride: { 'empty-import-meta': 'silent' },
});
console.log(`bundled envd -> ${outfile}`);
